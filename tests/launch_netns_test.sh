#!/usr/bin/env bash
# tests/launch_netns_test.sh MESHPOOL: `meshpool launch` across three
# network namespaces standing in for hosts (one bridge namespace joins
# them; nothing touches this host's own network). --exec runs each command
# line in its host's namespace instead of over ssh. Checks: --dry-run names
# every host; the cluster runs TLS with a certificate per host; links
# naming devices a host lacks are refused before anything
# starts; --discover-links finds no cable where no host has an RDMA device
# and starts nothing; a coordinator that cannot start fails the launch at once; the real launch brings up a coordinator and three nodes that
# register from their namespaces' addresses; a 1 MiB value put from one
# host reads back byte for byte on another; every line of output is marked
# with its host; SIGINT stops everything, leaving no process in any
# namespace. (`ip netns exec` gives every command its own mount namespace,
# so no client takes a node for same-host shared memory: the values cross
# the bridge over TCP.) Needs root and iproute2: without them it says why and exits 77
# (ctest: skipped).
set -euo pipefail
# shellcheck source=tests/launch_test_util.sh
source "$(dirname "$0")/launch_test_util.sh"
meshpool="$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"
if [ "$(id -u)" != 0 ] || ! command -v ip > /dev/null; then
  echo "SKIPPED: needs root and iproute2 to create network namespaces" >&2
  exit 77
fi
tag="mpl$$"
hosts=(a b c)
tmp="$(mktemp -d)"
launch_pid=""
cleanup() {
  if [ -n "$launch_pid" ]; then kill -KILL "$launch_pid" 2> /dev/null || true; fi
  for h in "${hosts[@]}" br; do
    for p in $(ip netns pids "$tag-$h" 2> /dev/null); do kill -KILL "$p" 2> /dev/null || true; done
    ip netns del "$tag-$h" 2> /dev/null || true
  done
  rm -rf "$tmp"
}
trap cleanup EXIT

ip netns add "$tag-br"
ip -n "$tag-br" link add br0 type bridge
ip -n "$tag-br" link set br0 up
i=1
for h in "${hosts[@]}"; do
  ip netns add "$tag-$h"
  ip link add "$tag-$h" netns "$tag-$h" type veth peer name "p$h" netns "$tag-br"
  ip -n "$tag-br" link set "p$h" master br0 up
  ip -n "$tag-$h" addr add "10.213.0.$i/24" dev "$tag-$h"
  ip -n "$tag-$h" link set "$tag-$h" up
  ip -n "$tag-$h" link set lo up
  i=$((i + 1))
done
in_host() { local h="$1"; shift; ip netns exec "$tag-$h" "$@"; }

cat > "$tmp/hosts.json" <<EOF
{"coordinator": {"host": "a", "port": 7070},
 "hosts": [
  {"name": "a", "ssh": "$tag-a", "address": "10.213.0.1"},
  {"name": "b", "ssh": "$tag-b", "address": "10.213.0.2"},
  {"name": "c", "ssh": "$tag-c", "address": "10.213.0.3"}]}
EOF
args=(--hostfile "$tmp/hosts.json" --exec 'ip netns exec {ssh} sh -c {command}'
      --binary "$meshpool" --transport tcp --capacity 64MiB
      --start-timeout 60s)

"$meshpool" launch "${args[@]}" --insecure --dry-run > "$tmp/dry.txt"
for h in "${hosts[@]}"; do
  grep -q "^\[$h node\] ip netns exec $tag-$h sh -c" "$tmp/dry.txt" \
    || { cat "$tmp/dry.txt"; echo "FAIL: --dry-run has no node on $h" >&2; exit 1; }
done

# Links to devices the hosts do not have: launch asks each host (meshpool
# doctor --json, run in its namespace) and refuses before starting anything.
cat > "$tmp/mesh.json" <<EOF
{"hosts": [
  {"name": "a", "ssh": "$tag-a", "address": "10.213.0.1", "links": {"b": "rdma_en2"}},
  {"name": "b", "ssh": "$tag-b", "address": "10.213.0.2", "links": {"a": "rdma_en2"}}]}
EOF
rc=0
"$meshpool" launch "${args[@]}" --insecure --hostfile "$tmp/mesh.json" \
  > "$tmp/mesh.txt" 2>&1 || rc=$?
grep -q "host a has no RDMA device rdma_en2 (its link to b" "$tmp/mesh.txt" \
  && [ "$rc" = 1 ] \
  || { cat "$tmp/mesh.txt"; echo "FAIL: a missing link device gave rc $rc" >&2; exit 1; }
for h in a b; do
  [ "$(ip netns pids "$tag-$h" | wc -l)" = 0 ] \
    || { echo "FAIL: the refused launch left processes on $h" >&2; exit 1; }
done

# --discover-links asks every host (doctor in its namespace) for RDMA
# devices with an address on a cable's subnet. The namespaces have none,
# so it finds no cable, says what to do, and starts nothing. (Cables found
# for real: tests/launch_discover_vm_test.sh, in the Soft-RoCE VM.)
rc=0
"$meshpool" launch "${args[@]}" --insecure --discover-links \
  > "$tmp/discover.txt" 2>&1 || rc=$?
grep -q "no cable found: no two hosts reported RDMA devices" "$tmp/discover.txt" \
  && grep -q "b reported no RDMA device with an active port and an IPv4 address" "$tmp/discover.txt" \
  && [ "$rc" = 1 ] \
  || { cat "$tmp/discover.txt"; echo "FAIL: discovery without devices gave rc $rc" >&2; exit 1; }
for h in "${hosts[@]}"; do
  [ "$(ip netns pids "$tag-$h" | wc -l)" = 0 ] \
    || { echo "FAIL: the discovery left processes on $h" >&2; exit 1; }
done

# A coordinator that cannot start fails the launch at once, saying so.
rc=0
"$meshpool" launch "${args[@]}" --insecure --binary /nonexistent/meshpool \
  > "$tmp/bad.txt" 2>&1 || rc=$?
grep -q "coordinator on a exited (exit status 127) before it listened" "$tmp/bad.txt" \
  && [ "$rc" = 1 ] \
  || { cat "$tmp/bad.txt"; echo "FAIL: a missing binary gave rc $rc" >&2; exit 1; }

# The real launch runs TLS: a certificate per host named as its node id
# (`certs add DIR node NAME`), the same directory on every host.
"$meshpool" certs init "$tmp/tls" --nodes 0 > /dev/null
for h in "${hosts[@]}"; do "$meshpool" certs add "$tmp/tls" node "$h" > /dev/null; done
export MESHPOOL_TLS_DIR="$tmp/tls"  # the client commands' certificates
"$meshpool" launch "${args[@]}" --tls-dir "$tmp/tls" > "$tmp/launch.txt" 2>&1 &
launch_pid=$!
coord=10.213.0.1:7070
await_alive "$meshpool" "$tag-c" "$coord" 3 "$launch_pid" "$tmp/launch.txt"
in_host c "$meshpool" stat --coordinator "$coord" > "$tmp/stat.txt"
for i in 1 2 3; do
  grep -q "10.213.0.$i" "$tmp/stat.txt" \
    || { cat "$tmp/stat.txt"; echo "FAIL: no node at 10.213.0.$i" >&2; exit 1; }
done

head -c 1048576 /dev/urandom > "$tmp/value"
in_host c "$meshpool" put --coordinator "$coord" launch-key "$tmp/value"
in_host b "$meshpool" get --coordinator "$coord" launch-key --output "$tmp/back"
cmp "$tmp/value" "$tmp/back"

grep -q "^\[a coordinator\] meshpool coordinator listening on" "$tmp/launch.txt"
for h in "${hosts[@]}"; do
  grep -q "^\[$h node\] meshpool node $h serving" "$tmp/launch.txt" \
    || { cat "$tmp/launch.txt"; echo "FAIL: no marked output from $h" >&2; exit 1; }
done

kill -INT "$launch_pid"
rc=0
wait "$launch_pid" || rc=$?
launch_pid=""
if [ "$rc" != 0 ]; then
  cat "$tmp/launch.txt"
  echo "FAIL: launch exited $rc after SIGINT" >&2
  exit 1
fi
grep -q "meshpool launch: stop signal" "$tmp/launch.txt"
for h in "${hosts[@]}"; do
  left=$(ip netns pids "$tag-$h" | wc -l)
  [ "$left" = 0 ] || { ps -f $(ip netns pids "$tag-$h"); echo "FAIL: $left processes left on $h" >&2; exit 1; }
done
echo "launch across 3 namespaces: cluster up, 1 MiB intact across hosts, all stopped"
