#!/usr/bin/env bash
# bench/verbs_bench_guest.sh BUILD_DIR: runs INSIDE the Soft-RoCE VM (see
# bench/verbs_bench.sh, which boots it). In one boot: perftest's ib_*_lat and
# ib_*_bw on rxe0, then meshpool's own GET/PUT latency and large-value GET
# bandwidth over verbs, then prints one table with the ratios.
set -euo pipefail
build="$1"
meshpool="$build/tools/meshpool"
dev="${MESHPOOL_BENCH_DEVICE:-rxe0}"
gid="${MESHPOOL_BENCH_GID:-1}"
iters_lat="${ITERS_LAT:-2000}"
iters_bw="${ITERS_BW:-40}"
duration="${DURATION:-5s}"
tmp="$(mktemp -d)"

# perftest TEST SIZE ITERS: runs the server and the client of one perftest
# on $dev and prints the client's result line (the one starting with SIZE).
perftest() {
  local test="$1" size="$2" iters="$3"
  timeout 120 "$test" -d "$dev" -x "$gid" -s "$size" -n "$iters" -F \
    > "$tmp/server.txt" 2>&1 &
  local server=$!
  sleep 1
  timeout 120 "$test" -d "$dev" -x "$gid" -s "$size" -n "$iters" -F 127.0.0.1 \
    > "$tmp/client.txt" 2>&1 || { cat "$tmp/client.txt" "$tmp/server.txt" >&2; return 1; }
  wait "$server" || true
  awk -v s="$size" '$1 == s { print; exit }' "$tmp/client.txt"
}

# ib_*_lat columns: bytes iters t_min t_max t_typical t_avg t_stdev p99 p99.9
read_lat=$(perftest ib_read_lat 4096 "$iters_lat")
write_lat=$(perftest ib_write_lat 4096 "$iters_lat")
# ib_*_bw columns: bytes iters BW_peak BW_average[MB/s] MsgRate
read_bw_1m=$(perftest ib_read_bw 1048576 "$iters_bw")
read_bw_16m=$(perftest ib_read_bw 16777216 "$iters_bw")
write_bw_16m=$(perftest ib_write_bw 16777216 "$iters_bw")

port=$((20000 + RANDOM % 20000))
"$meshpool" up --nodes 1 --capacity 1GiB --port "$port" --transport verbs \
  --device "$dev" --gid-index "$gid" > "$tmp/up.txt" 2>&1 &
up=$!
trap 'kill -INT $up 2>/dev/null; wait $up 2>/dev/null || true; rm -rf "$tmp"' EXIT
for _ in $(seq 300); do
  grep -q "cluster up" "$tmp/up.txt" 2>/dev/null && break
  sleep 0.1
done
grep -q "cluster up" "$tmp/up.txt" || { cat "$tmp/up.txt" >&2; exit 1; }
export MESHPOOL_COORDINATOR="127.0.0.1:$port"
node_pid=$(pgrep -f "meshpool node" | head -1)

# CPU seconds (user + system) the memory node has used so far.
node_cpu() {
  awk -v hz="$(getconf CLK_TCK)" '{ printf "%.3f", ($14 + $15) / hz }' \
    "/proc/$node_pid/stat"
}

# bench SIZE READ_FRACTION KEYS: one `meshpool bench` run, one thread.
bench() {
  local out
  out=$("$meshpool" bench --value-size "$1" --read-fraction "$2" --keys "$3" \
          --threads 1 --batch 1 --duration "$duration" --device "$dev" \
          --gid-index "$gid")
  echo "$out" | grep -q "errors 0  corrupt values 0" || { echo "$out" >&2; return 1; }
  echo "$out"
}
lat() { echo "$1" | sed -n 's/.*p50 \([0-9]*\)us  p99 \([0-9]*\)us.*/\1 \2/p'; }
gbps() { echo "$1" | sed -n 's/.*throughput \([0-9.]*\) GB\/s.*/\1/p'; }

# The node's own background work (heartbeats, its reclamation scan) over an
# idle period as long as a GET run: the baseline for the figures below.
idle0=$(node_cpu)
sleep "${duration%s}"
idle1=$(node_cpu)
cpu0=$(node_cpu)
get_small=$(bench 4KiB 1 100)
cpu1=$(node_cpu)
put_small=$(bench 4KiB 0 100)
get_1m=$(bench 1MiB 1 16)
cpu2=$(node_cpu)
get_16m=$(bench 16MiB 1 8)
cpu3=$(node_cpu)

read -r get_p50 get_p99 <<< "$(lat "$get_small")"
read -r put_p50 put_p99 <<< "$(lat "$put_small")"
rl_typ=$(echo "$read_lat" | awk '{ print $5 }')
rl_p99=$(echo "$read_lat" | awk '{ print $8 }')
wl_typ=$(echo "$write_lat" | awk '{ print $5 }')
wl_p99=$(echo "$write_lat" | awk '{ print $8 }')
# MB/s (perftest's MB = 2^20 bytes) -> GB/s (10^9 bytes)
rb1=$(echo "$read_bw_1m" | awk '{ printf "%.3f", $4 * 1048576 / 1e9 }')
rb16=$(echo "$read_bw_16m" | awk '{ printf "%.3f", $4 * 1048576 / 1e9 }')
wb16=$(echo "$write_bw_16m" | awk '{ printf "%.3f", $4 * 1048576 / 1e9 }')
# GET bandwidth of one stream: value bytes / median GET time. (`meshpool
# bench`'s own GB/s also counts the time it spends checking every byte of
# every value it got, which perftest does not do; it is printed too.)
per_get() { awk -v b="$2" -v us="$(lat "$1" | awk '{ print $1 }')" \
  'BEGIN { if (us > 0) printf "%.3f", b / (us * 1000); else print 0 }'; }
g1=$(per_get "$get_1m" 1048576)
g16=$(per_get "$get_16m" 16777216)
g16_bench=$(gbps "$get_16m")
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "n/a" }'; }
verdict() { awk -v r="$1" -v t="$2" -v dir="$3" 'BEGIN {
  if (dir == "le") print (r <= t ? "met" : "MISSED"); else print (r >= t ? "met" : "MISSED") }'; }

r_get=$(ratio "$get_p50" "$rl_typ")
r_put=$(ratio "$put_p50" "$wl_typ")
r_bw16=$(ratio "$g16" "$rb16")
r_bw1=$(ratio "$g1" "$rb1")
printf "\n%-34s %12s %12s %8s %s\n" "measure (one VM boot, $dev)" meshpool perftest ratio target
printf "%-34s %12s %12s %8s %s\n" "4 KiB GET median (us)" "$get_p50" "$rl_typ" "$r_get" "<= 2.0 ($(verdict "$r_get" 2.0 le))"
printf "%-34s %12s %12s %8s\n" "4 KiB GET p99 (us)" "$get_p99" "$rl_p99" "$(ratio "$get_p99" "$rl_p99")"
printf "%-34s %12s %12s %8s %s\n" "4 KiB PUT median (us)" "$put_p50" "$wl_typ" "$r_put" "<= 2.5 ($(verdict "$r_put" 2.5 le))"
printf "%-34s %12s %12s %8s\n" "4 KiB PUT p99 (us)" "$put_p99" "$wl_p99" "$(ratio "$put_p99" "$wl_p99")"
printf "%-34s %12s %12s %8s\n" "1 MiB GET bandwidth (GB/s)" "$g1" "$rb1" "$r_bw1"
printf "%-34s %12s %12s %8s %s\n" "16 MiB GET bandwidth (GB/s)" "$g16" "$rb16" "$r_bw16" ">= 0.85 ($(verdict "$r_bw16" 0.85 ge))"
printf "%-34s %12s %12s %8s\n" "  same, with bench's value checks" "$g16_bench" "$rb16" "$(ratio "$g16_bench" "$rb16")"
printf "%-34s %12s %12s\n" "16 MiB WRITE bandwidth (GB/s)" "" "$wb16"
printf "%-34s %12s\n" "node CPU s idle (baseline)" "$(awk -v a="$idle0" -v b="$idle1" 'BEGIN { printf "%.2f", b - a }')"
printf "%-34s %12s\n" "node CPU s during 4 KiB GETs" "$(awk -v a="$cpu0" -v b="$cpu1" 'BEGIN { printf "%.2f", b - a }')"
printf "%-34s %12s\n" "node CPU s during 16 MiB GETs" "$(awk -v a="$cpu2" -v b="$cpu3" 'BEGIN { printf "%.2f", b - a }')"
printf "(each GET run lasts %s and includes its short preload of the keys)\n" "$duration"
