# Sourced by the launch tests (launch_netns_test.sh,
# launch_discover_vm_test.sh): helpers for a launch running in the
# background across network namespaces.

# await_alive MESHPOOL NETNS COORDINATOR COUNT LAUNCH_PID LOG: waits until
# the coordinator, asked from NETNS, lists COUNT nodes alive (at most
# TRIES x 0.2 s, default 300), or fails showing the launch's LOG when they
# do not come up or the launch exits first.
await_alive() {
  local meshpool="$1" netns="$2" coord="$3" count="$4" pid="$5" log="$6"
  local alive=0
  for _ in $(seq "${TRIES:-300}"); do
    alive=$(ip netns exec "$netns" "$meshpool" stat --coordinator "$coord" \
              2> /dev/null | grep -c " alive " || true)
    [ "$alive" = "$count" ] && return 0
    kill -0 "$pid" 2> /dev/null || break
    sleep 0.2
  done
  cat "$log"
  echo "FAIL: $alive of $count nodes alive" >&2
  exit 1
}
