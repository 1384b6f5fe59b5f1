# bench/vm_bench_lib.sh: helpers the Soft-RoCE VM benchmarks source (inside
# the guest): perftest runs, a one-node cluster, `meshpool bench` runs and
# the arithmetic of their table. Expects $meshpool, $tmp and $duration.

# perftest TEST SIZE ITERS SERVER_DEV CLIENT_DEV GID [ARGS...]: runs the
# server and the client of one perftest and prints the client's result line
# (the one starting with SIZE).
perftest() {
  local test="$1" size="$2" iters="$3" sdev="$4" cdev="$5" gid="$6"
  shift 6
  timeout 120 "$test" -d "$sdev" -x "$gid" -s "$size" -n "$iters" -F "$@" \
    > "$tmp/server.txt" 2>&1 &
  local server=$!
  sleep 1
  timeout 120 "$test" -d "$cdev" -x "$gid" -s "$size" -n "$iters" -F "$@" \
    127.0.0.1 > "$tmp/client.txt" 2>&1 \
    || { cat "$tmp/client.txt" "$tmp/server.txt" >&2; return 1; }
  wait "$server" || true
  awk -v s="$size" '$1 == s { print; exit }' "$tmp/client.txt"
}

# start_node ARGS...: `meshpool up` with one node of $CAPACITY (2 GiB, so
# that its 32 MiB slabs hold a 16 MiB value), not serving shared memory
# (the client on this host would take it), and ARGS (transport flags);
# waits for it, exports MESHPOOL_COORDINATOR and sets $up and
# $node_pid. The caller's EXIT trap must call stop_node.
start_node() {
  local port=$((20000 + RANDOM % 20000))
  "$meshpool" up --nodes 1 --capacity "${CAPACITY:-2GiB}" --port "$port" \
    --no-shm "$@" \
    > "$tmp/up.txt" 2>&1 &
  up=$!
  for _ in $(seq 300); do
    grep -q "cluster up" "$tmp/up.txt" 2>/dev/null && break
    sleep 0.1
  done
  grep -q "cluster up" "$tmp/up.txt" || { cat "$tmp/up.txt" >&2; return 1; }
  export MESHPOOL_COORDINATOR="127.0.0.1:$port"
  node_pid=$(pgrep -f "meshpool node" | head -1)
}
stop_node() {
  if [ -n "${up:-}" ]; then kill -INT "$up" 2>/dev/null; wait "$up" 2>/dev/null || true; fi
}

# CPU seconds (user + system) the memory node has used so far.
node_cpu() {
  awk -v hz="$(getconf CLK_TCK)" '{ printf "%.3f", ($14 + $15) / hz }' \
    "/proc/$node_pid/stat"
}

# bench SIZE READ_FRACTION KEYS ARGS...: one `meshpool bench` run, one
# thread, batch 1; fails unless every value came back intact.
bench() {
  local size="$1" reads="$2" keys="$3" out
  shift 3
  out=$("$meshpool" bench --value-size "$size" --read-fraction "$reads" \
          --keys "$keys" --threads 1 --batch 1 --duration "$duration" "$@")
  echo "$out" | grep -q "errors 0  corrupt values 0" || { echo "$out" >&2; return 1; }
  echo "$out"
}
lat() { echo "$1" | sed -n 's/.*p50 \([0-9]*\)us  p99 \([0-9]*\)us.*/\1 \2/p'; }
gbps() { echo "$1" | sed -n 's/.*throughput \([0-9.]*\) GB\/s.*/\1/p'; }
# GET bandwidth of one stream: value bytes / median GET time. (`meshpool
# bench`'s own GB/s also counts the time it spends checking every byte of
# every value it got, which perftest does not do.)
per_get() { awk -v b="$2" -v us="$(lat "$1" | awk '{ print $1 }')" \
  'BEGIN { if (us > 0) printf "%.3f", b / (us * 1000); else print 0 }'; }
# perftest's MB/s (2^20 bytes) of a bw line -> GB/s (10^9 bytes)
bw_gbps() { echo "$1" | awk '{ printf "%.3f", $4 * 1048576 / 1e9 }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "n/a" }'; }
diff_of() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", b - a }'; }
verdict() { awk -v r="$1" -v t="$2" -v dir="$3" 'BEGIN {
  if (dir == "le") print (r <= t ? "met" : "MISSED"); else print (r >= t ? "met" : "MISSED") }'; }
