#!/usr/bin/env bash
# bench/run_cluster_bench.sh [BUILD_DIR]: starts a local cluster (coordinator
# + 3 memory nodes, TCP on loopback), runs `meshpool bench` over a grid of
# value sizes and batch sizes, prints one line per run, and stops the
# cluster. Numbers in docs/BENCHMARKS.md come from this script. SMOKE=1:
# 4 KiB values only, 1 s per run, 256 MiB nodes (CI's check that the script
# still works; the numbers mean nothing). The nodes run --no-shm, so the
# client on their host takes TCP as the table says; SHM=1 lets it map their
# pools instead.
set -euo pipefail
build="${1:-$(cd "$(dirname "$0")/.." && pwd)/build}"
meshpool="$build/tools/meshpool"
port=$((20000 + RANDOM % 20000))
sizes="4KiB 64KiB 1MiB"
capacity=1GiB
if [ "${SMOKE:-0}" = 1 ]; then
  sizes=4KiB capacity=256MiB
  : "${DURATION:=1s}"
fi
shm_flag=--no-shm
[ "${SHM:-0}" = 1 ] && shm_flag=
"$meshpool" up --nodes 3 --capacity "$capacity" --port "$port" $shm_flag \
  > /tmp/meshpool-bench-up.log 2>&1 &
up=$!
trap 'kill -INT $up 2>/dev/null; wait $up 2>/dev/null || true' EXIT
for _ in $(seq 100); do
  grep -q "cluster up" /tmp/meshpool-bench-up.log 2>/dev/null && break
  sleep 0.1
done
export MESHPOOL_COORDINATOR="127.0.0.1:$port"
printf "%-8s %-6s %-8s %12s %10s %10s %10s %10s\n" value batch threads keys/s GB/s p50_us p99_us p999_us
for size in $sizes; do
  for batch in 1 16; do
    keys=$([ "$size" = 1MiB ] && echo 256 || echo 2000)
    out=$("$meshpool" bench --value-size "$size" --batch "$batch" --threads 4 \
            --read-fraction 0.9 --duration "${DURATION:-5s}" --keys "$keys")
    kps=$(echo "$out" | sed -n 's/.*(keys\/s \([0-9.]*\).*/\1/p')
    gbps=$(echo "$out" | sed -n 's/.*throughput \([0-9.]*\) GB\/s.*/\1/p')
    lat=$(echo "$out" | sed -n 's/.*p50 \([0-9]*\)us  p99 \([0-9]*\)us  p999 \([0-9]*\)us.*/\1 \2 \3/p')
    printf "%-8s %-6s %-8s %12s %10s %10s %10s %10s\n" "$size" "$batch" 4 "$kps" "$gbps" $lat
    echo "$out" | grep -q "errors 0  corrupt values 0" || { echo "$out"; exit 1; }
  done
done
