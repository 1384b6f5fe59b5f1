#!/usr/bin/env bash
# tests/launch_discover_vm_test.sh MESHPOOL: `meshpool launch
# --discover-links` finding real cables. It runs itself in the Soft-RoCE VM
# (tools/vm/run.sh). There, three network namespaces a, b and c stand in
# for Macs, and every pair is joined by a "cable": a veth pair with a /30 of
# its own and a Soft-RoCE device on each end (rxe_ab in a, rxe_ba in b), as
# a Thunderbolt cable is one RDMA device at each end. Launch asks every
# namespace (`meshpool doctor --json` run in it) and must print the device
# matrix those cables make; with the b-c cable's addresses removed, the
# matrix lacks that pair and launch warns that the mesh is not full.
set -euo pipefail
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
for h in "${hosts[@]}"; do
  ip netns add "$h"
  ip -n "$h" link set lo up
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
  {"name": "a", "address": "10.0.12.1"},
  {"name": "b", "address": "10.0.12.2"},
  {"name": "c", "address": "10.0.13.2"}]}
JSON
# discover OUT ROW...: a dry run with --discover-links into OUT, whose
# device matrix must have every ROW.
discover() {
  local out="$1"
  shift
  "$meshpool" launch --hostfile "$tmp/hosts.json" --insecure \
    --exec 'ip netns exec {ssh} sh -c {command}' --binary "$meshpool" \
    --discover-links --dry-run > "$out" 2>&1 \
    || { cat "$out"; echo "FAIL: discovery failed" >&2; exit 1; }
  cat "$out"
  for row in "$@"; do
    grep -qx "$row" "$out" \
      || { echo "FAIL: the found device matrix lacks the row '$row'" >&2; exit 1; }
  done
}

discover "$tmp/full.txt" "a - rxe_ab rxe_ac" "b rxe_ba - rxe_bc" "c rxe_ca rxe_cb -"
grep -q "# meshpool launch: link a rxe_ab <-> b rxe_ba (10.0.12.0/30)" "$tmp/full.txt"

# Unplug b-c, as far as addresses go: its ends have none any more.
ip -n b addr flush dev bc
ip -n c addr flush dev cb
discover "$tmp/partial.txt" "a - rxe_ab rxe_ac" "b rxe_ba - -" "c rxe_ca - -"
grep -q "# warning: no link between b and c" "$tmp/partial.txt"
echo "launch --discover-links in the VM: 3 cables found, then the missing one named"
