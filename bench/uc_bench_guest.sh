#!/usr/bin/env bash
# bench/uc_bench_guest.sh BUILD_DIR: runs INSIDE the Soft-RoCE VM with two
# rxe devices (see bench/uc_bench.sh, which boots it). The server side (the
# perftest server, the memory node) is on rxe0, the client side on rxe1, so
# every packet crosses the veth pair. In one boot: ib_send_lat (polling,
# and sleeping on completion events with -e) and ib_send_bw on UC QPs,
# then meshpool over uc (UC QPs, thunderbolt profile): 4 KiB GET latency
# with node and client polling the default 20 us before they sleep (shorter
# than the emulated round trip: they sleep) and with both polling ($POLL,
# default 2ms: longer than the round trip, as perftest polls), and large
# GET bandwidth ($BIG, default 4 MiB), the latter again with 1 % loss on
# the link (tc netem), and the node's CPU per GB served.
# SMOKE=1 makes every run tiny (CI: the script keeps working).
set -euo pipefail
build="$1"
meshpool="$build/tools/meshpool"
sdev=rxe0
cdev=rxe1
gid="${MESHPOOL_BENCH_GID:-1}"
iters_lat="${ITERS_LAT:-2000}"
iters_bw="${ITERS_BW:-20}"
duration="${DURATION:-5s}"
# The large value: a GET of it must finish within the node's read lease
# (500 ms), which the emulated link's speed bounds (16 MiB does not).
big="${BIG:-4MiB}"
poll="${POLL:-2ms}"
big_bytes=$(( ${big%MiB} << 20 ))
if [ "${SMOKE:-0}" = 1 ]; then iters_lat=50 iters_bw=5 duration=1s; fi
tmp="$(mktemp -d)"
. "$(dirname "$0")/vm_bench_lib.sh"
netdev=ve1  # rxe1's network device (tools/vm/guest.sh --rxe 2)
trap 'tc qdisc del dev "$netdev" root 2>/dev/null || true; stop_node; rm -rf "$tmp"' EXIT

# ib_send_lat columns: bytes iters t_min t_max t_typical t_avg t_stdev p99 p99.9
send_lat=$(perftest ib_send_lat 4096 "$iters_lat" "$sdev" "$cdev" "$gid" -c UC)
send_lat_e=$(perftest ib_send_lat 4096 "$iters_lat" "$sdev" "$cdev" "$gid" -c UC -e)
# ib_send_bw columns: bytes iters BW_peak BW_average[MB/s] MsgRate
send_bw=$(perftest ib_send_bw "$big_bytes" "$iters_bw" "$sdev" "$cdev" "$gid" -c UC)

start_node --transport uc --profile thunderbolt --device "$sdev" --gid-index "$gid"
client=(--device "$cdev" --gid-index "$gid")

idle0=$(node_cpu)
sleep "${duration%s}"
idle1=$(node_cpu)
get_small=$(bench 4KiB 1 100 "${client[@]}")
cpu0=$(node_cpu)
get_big=$(bench "$big" 1 8 "${client[@]}")
cpu1=$(node_cpu)
modprobe sch_netem
tc qdisc add dev "$netdev" root netem loss 1%
get_big_loss=$(bench "$big" 1 8 "${client[@]}")
tc qdisc del dev "$netdev" root

# Node and client polling for $poll before they sleep (--busy-poll).
stop_node
start_node --transport uc --profile thunderbolt --device "$sdev" --gid-index "$gid" --busy-poll "$poll"
get_poll=$(bench 4KiB 1 100 "${client[@]}" --busy-poll "$poll")

# The same GETs over tcp in this boot (on loopback: `up` binds its nodes
# there, so the veth pair is not crossed): what a responder on the node
# costs when the kernel's TCP carries it, for the ratios below.
stop_node
start_node --transport tcp
tcp_small=$(bench 4KiB 1 100)
tcp0=$(node_cpu)
tcp_big=$(bench "$big" 1 8)
tcp1=$(node_cpu)

read -r get_p50 get_p99 <<< "$(lat "$get_small")"
read -r poll_p50 poll_p99 <<< "$(lat "$get_poll")"
sl_typ=$(echo "$send_lat" | awk '{ print $5 }')
sl_p99=$(echo "$send_lat" | awk '{ print $8 }')
sle_typ=$(echo "$send_lat_e" | awk '{ print $5 }')
sle_p99=$(echo "$send_lat_e" | awk '{ print $8 }')
sbig=$(bw_gbps "$send_bw")
gbig=$(per_get "$get_big" "$big_bytes")
gbig_loss=$(per_get "$get_big_loss" "$big_bytes")
# GB the node served during the large GET run: bench's GB/s (which counts
# its value checks as time too, so this undercounts) times the duration.
served=$(awk -v g="$(gbps "$get_big")" -v d="${duration%s}" 'BEGIN { printf "%.3f", g * d }')
cpubig=$(diff_of "$cpu0" "$cpu1")

r_get=$(ratio "$poll_p50" "$sl_typ")
r_bw=$(ratio "$gbig" "$sbig")
r_loss=$(ratio "$gbig_loss" "$gbig")
printf "\n%-36s %12s %12s %8s %s\n" "measure (one VM boot, $cdev -> $sdev)" meshpool perftest ratio target
printf "%-36s %12s %12s %8s %s\n" "4 KiB GET median, polling $poll (us)" "$poll_p50" "$sl_typ" "$r_get" "<= 2.5 ($(verdict "$r_get" 2.5 le))"
printf "%-36s %12s %12s %8s\n" "4 KiB GET p99, polling $poll (us)" "$poll_p99" "$sl_p99" "$(ratio "$poll_p99" "$sl_p99")"
printf "%-36s %12s %12s %8s\n" "4 KiB GET median, default poll (us)" "$get_p50" "$sl_typ" "$(ratio "$get_p50" "$sl_typ")"
printf "%-36s %12s %12s %8s\n" "  the same against ib_send_lat -e" "$get_p50" "$sle_typ" "$(ratio "$get_p50" "$sle_typ")"
printf "%-36s %12s %12s %8s\n" "  p99 against ib_send_lat -e" "$get_p99" "$sle_p99" "$(ratio "$get_p99" "$sle_p99")"
printf "%-36s %12s %12s %8s %s\n" "$big GET bandwidth (GB/s)" "$gbig" "$sbig" "$r_bw" ">= 0.8 ($(verdict "$r_bw" 0.8 ge))"
printf "%-36s %12s %12s %8s %s\n" "$big GET, 1 % loss (GB/s; vs none)" "$gbig_loss" "$gbig" "$r_loss" ">= 0.5 ($(verdict "$r_loss" 0.5 ge))"
read -r tcp_p50 _ <<< "$(lat "$tcp_small")"
tcp_served=$(awk -v g="$(gbps "$tcp_big")" -v d="${duration%s}" 'BEGIN { printf "%.3f", g * d }')
tcp_cpu=$(diff_of "$tcp0" "$tcp1")
printf "\n%-36s %12s %12s %8s\n" "uc against tcp (same boot)" uc tcp ratio
printf "%-36s %12s %12s %8s\n" "4 KiB GET median (us)" "$get_p50" "$tcp_p50" "$(ratio "$get_p50" "$tcp_p50")"
printf "%-36s %12s %12s %8s\n" "$big GET bandwidth (GB/s)" "$gbig" "$(per_get "$tcp_big" "$big_bytes")" "$(ratio "$gbig" "$(per_get "$tcp_big" "$big_bytes")")"
printf "%-36s %12s %12s %8s\n" "node CPU s per GB served" "$(ratio "$cpubig" "$served")" "$(ratio "$tcp_cpu" "$tcp_served")" "$(ratio "$(ratio "$cpubig" "$served")" "$(ratio "$tcp_cpu" "$tcp_served")")"
printf "%-36s %12s\n" "node CPU s idle (baseline)" "$(diff_of "$idle0" "$idle1")"
printf "%-36s %12s\n" "node CPU s during $big GETs" "$cpubig"
printf "%-36s %12s\n" "node CPU s per GB served" "$(ratio "$cpubig" "$served")"
printf "(each GET run lasts %s and includes its short preload of the keys)\n" "$duration"
