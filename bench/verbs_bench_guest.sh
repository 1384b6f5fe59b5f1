#!/usr/bin/env bash
# bench/verbs_bench_guest.sh BUILD_DIR: runs INSIDE the Soft-RoCE VM (see
# bench/verbs_bench.sh, which boots it). In one boot: perftest's ib_*_lat and
# ib_*_bw on rxe0, then meshpool's own GET/PUT latency and large-value GET
# bandwidth over verbs, then prints one table with the ratios. SMOKE=1
# makes every run tiny (CI: the script keeps working).
set -euo pipefail
build="$1"
meshpool="$build/tools/meshpool"
dev="${MESHPOOL_BENCH_DEVICE:-rxe0}"
gid="${MESHPOOL_BENCH_GID:-1}"
iters_lat="${ITERS_LAT:-2000}"
iters_bw="${ITERS_BW:-40}"
duration="${DURATION:-5s}"
if [ "${SMOKE:-0}" = 1 ]; then iters_lat=50 iters_bw=5 duration=1s; fi
tmp="$(mktemp -d)"
. "$(dirname "$0")/vm_bench_lib.sh"
trap 'stop_node; rm -rf "$tmp"' EXIT

# ib_*_lat columns: bytes iters t_min t_max t_typical t_avg t_stdev p99 p99.9
read_lat=$(perftest ib_read_lat 4096 "$iters_lat" "$dev" "$dev" "$gid")
write_lat=$(perftest ib_write_lat 4096 "$iters_lat" "$dev" "$dev" "$gid")
# ib_*_bw columns: bytes iters BW_peak BW_average[MB/s] MsgRate
read_bw_1m=$(perftest ib_read_bw 1048576 "$iters_bw" "$dev" "$dev" "$gid")
read_bw_16m=$(perftest ib_read_bw 16777216 "$iters_bw" "$dev" "$dev" "$gid")
write_bw_16m=$(perftest ib_write_bw 16777216 "$iters_bw" "$dev" "$dev" "$gid")

start_node --transport verbs --device "$dev" --gid-index "$gid"
client=(--device "$dev" --gid-index "$gid")

# The node's own background work (heartbeats, its reclamation scan) over an
# idle period as long as a GET run: the baseline for the figures below.
idle0=$(node_cpu)
sleep "${duration%s}"
idle1=$(node_cpu)
cpu0=$(node_cpu)
get_small=$(bench 4KiB 1 100 "${client[@]}")
cpu1=$(node_cpu)
put_small=$(bench 4KiB 0 100 "${client[@]}")
get_1m=$(bench 1MiB 1 16 "${client[@]}")
cpu2=$(node_cpu)
get_16m=$(bench 16MiB 1 8 "${client[@]}")
cpu3=$(node_cpu)

read -r get_p50 get_p99 <<< "$(lat "$get_small")"
read -r put_p50 put_p99 <<< "$(lat "$put_small")"
rl_typ=$(echo "$read_lat" | awk '{ print $5 }')
rl_p99=$(echo "$read_lat" | awk '{ print $8 }')
wl_typ=$(echo "$write_lat" | awk '{ print $5 }')
wl_p99=$(echo "$write_lat" | awk '{ print $8 }')
rb1=$(bw_gbps "$read_bw_1m")
rb16=$(bw_gbps "$read_bw_16m")
wb16=$(bw_gbps "$write_bw_16m")
g1=$(per_get "$get_1m" 1048576)
g16=$(per_get "$get_16m" 16777216)
g16_bench=$(gbps "$get_16m")

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
printf "%-34s %12s\n" "node CPU s idle (baseline)" "$(diff_of "$idle0" "$idle1")"
printf "%-34s %12s\n" "node CPU s during 4 KiB GETs" "$(diff_of "$cpu0" "$cpu1")"
printf "%-34s %12s\n" "node CPU s during 16 MiB GETs" "$(diff_of "$cpu2" "$cpu3")"
printf "(each GET run lasts %s and includes its short preload of the keys)\n" "$duration"
