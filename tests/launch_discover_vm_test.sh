#!/usr/bin/env bash
# tests/launch_discover_vm_test.sh MESHPOOL: `meshpool launch
# --discover-links` finding real cables, then a cluster running over them.
# It runs itself in the Soft-RoCE VM (tools/vm/run.sh). There, three
# network namespaces a, b and c stand in for Macs: every pair is joined by
# a "cable", a veth pair with a /30 of its own and a Soft-RoCE device on
# each end (rxe_ab in a, rxe_ba in b), as a Thunderbolt cable is one RDMA
# device at each end; a bridge joins them on 10.213.0.0/24, the normal
# network. Checks: a dry run asks every namespace (`meshpool doctor
# --json` run in it) and prints the device matrix the cables make; the
# real launch starts the coordinator and three verbs nodes with that
# matrix, a value put from c reads back on c byte for byte, and SIGINT
# stops everything; with the b-c cable's addresses removed, the matrix
# lacks that pair and launch warns that the mesh is not full.
#
# RDMA traffic between the namespaces is not possible here: this kernel's
# Soft-RoCE receives only through a UDP socket in the initial namespace
# (rxe_net.c), so a READ from b to c's node fails with a local QP error.
# The value therefore stays on c. Traffic across a real link with a
# device per peer is the verbs suite's part (tools/vm/run.sh --rxe 2).
set -euo pipefail
# shellcheck source=tests/launch_test_util.sh
source "$(dirname "$0")/launch_test_util.sh"
meshpool="$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"
here="$(cd "$(dirname "$0")" && pwd)"
if [ "${MESHPOOL_IN_VM:-}" != 1 ]; then
  exec "$here/../tools/vm/run.sh" --timeout 400 --env MESHPOOL_IN_VM=1 \
    -- "$here/$(basename "$0")" "$meshpool"
fi

tmp="$(mktemp -d)"
hosts=(a b c)
# cable X Y N: veth XY in X and YX in Y, 10.0.N.1/30 and 10.0.N.2/30, and an
# rxe device on each end, created in its namespace.
cable() {
  ip link add "$1$2" netns "$1" type veth peer name "$2$1" netns "$2"
  ip -n "$1" addr add "10.0.$3.1/30" dev "$1$2"
  ip -n "$2" addr add "10.0.$3.2/30" dev "$2$1"
  ip -n "$1" link set "$1$2" up
  ip -n "$2" link set "$2$1" up
  ip netns exec "$1" rdma link add "rxe_$1$2" type rxe netdev "$1$2"
  ip netns exec "$2" rdma link add "rxe_$2$1" type rxe netdev "$2$1"
}
launch_pid=""
cleanup() {
  if [ -n "$launch_pid" ]; then kill -KILL "$launch_pid" 2> /dev/null || true; fi
}
trap cleanup EXIT
ip netns add br
ip -n br link add br0 type bridge
ip -n br link set br0 up
i=1
for h in "${hosts[@]}"; do
  ip netns add "$h"
  ip -n "$h" link set lo up
  ip link add "lan$h" type veth peer name "hub$h"
  ip link set "lan$h" netns "$h"
  ip link set "hub$h" netns br
  ip -n br link set "hub$h" master br0 up
  ip -n "$h" addr add "10.213.0.$i/24" dev "lan$h"
  ip -n "$h" link set "lan$h" up
  i=$((i + 1))
done
cable a b 12
cable a c 13
cable b c 23
for d in rxe_ab rxe_ba rxe_ac rxe_ca rxe_bc rxe_cb; do
  for _ in $(seq 100); do
    grep -q ACTIVE "/sys/class/infiniband/$d/ports/1/state" && break
    sleep 0.1
  done
done
rdma link show

cat > "$tmp/hosts.json" <<JSON
{"hosts": [
  {"name": "a", "address": "10.213.0.1"},
  {"name": "b", "address": "10.213.0.2"},
  {"name": "c", "address": "10.213.0.3"}]}
JSON
args=(--hostfile "$tmp/hosts.json" --insecure --discover-links
      --exec 'ip netns exec {ssh} sh -c {command}' --binary "$meshpool")
# discover OUT ROW...: a dry run with --discover-links into OUT, whose
# device matrix must have every ROW.
discover() {
  local out="$1"
  shift
  "$meshpool" launch "${args[@]}" --dry-run > "$out" 2>&1 \
    || { cat "$out"; echo "FAIL: discovery failed" >&2; exit 1; }
  cat "$out"
  for row in "$@"; do
    grep -qx "$row" "$out" \
      || { echo "FAIL: the found device matrix lacks the row '$row'" >&2; exit 1; }
  done
}

discover "$tmp/full.txt" "a - rxe_ab rxe_ac" "b rxe_ba - rxe_bc" "c rxe_ca rxe_cb -"
grep -q "# meshpool launch: link a rxe_ab <-> b rxe_ba (10.0.12.0/30)" "$tmp/full.txt"

# The real launch: verbs nodes, each told by the matrix which device
# reaches which host; a client on c puts and reads back (see the top).
"$meshpool" launch "${args[@]}" --transport verbs --capacity 64MiB \
  --start-timeout 120s > "$tmp/launch.txt" 2>&1 &
launch_pid=$!
coord=10.213.0.1:7070
TRIES=600 await_alive "$meshpool" c "$coord" 3 "$launch_pid" "$tmp/launch.txt"
ip netns exec c "$meshpool" stat --coordinator "$coord" | tee "$tmp/stat.txt"
[ "$(grep -c "verbs://" "$tmp/stat.txt")" = 3 ] \
  || { cat "$tmp/launch.txt"; echo "FAIL: not every node serves verbs" >&2; exit 1; }
matrix=/tmp/meshpool-launch/device-matrix
head -c 1048576 /dev/urandom > "$tmp/value"
ip netns exec c "$meshpool" put --coordinator "$coord" \
  --device-matrix "$matrix" --host-name c discover-key "$tmp/value"
ip netns exec c "$meshpool" get --coordinator "$coord" \
  --device-matrix "$matrix" --host-name c discover-key --output "$tmp/back"
cmp "$tmp/value" "$tmp/back"
kill -INT "$launch_pid"
rc=0
wait "$launch_pid" || rc=$?
launch_pid=""
cat "$tmp/launch.txt"
[ "$rc" = 0 ] || { echo "FAIL: launch exited $rc after SIGINT" >&2; exit 1; }
for h in "${hosts[@]}"; do
  [ "$(ip netns pids "$h" | wc -l)" = 0 ] \
    || { echo "FAIL: processes left on $h" >&2; exit 1; }
done

# Unplug b-c, as far as addresses go: its ends have none any more.
ip -n b addr flush dev bc
ip -n c addr flush dev cb
discover "$tmp/partial.txt" "a - rxe_ab rxe_ac" "b rxe_ba - -" "c rxe_ca - -"
grep -q "# warning: no link between b and c" "$tmp/partial.txt"
echo "launch --discover-links in the VM: 3 cables found, a verbs cluster started with their matrix kept 1 MiB intact, then the missing cable named"
