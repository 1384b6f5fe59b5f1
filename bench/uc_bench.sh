#!/usr/bin/env bash
# bench/uc_bench.sh [BUILD_DIR]: boots the Soft-RoCE VM once (two rxe
# devices on a veth pair) and runs, in that one boot, perftest's UC
# send/receive and meshpool over uc on UC queue pairs (thunderbolt
# profile), loss-free and under 1 % packet loss (bench/uc_bench_guest.sh),
# printing the table of ratios that docs/BENCHMARKS.md records. Only ratios
# mean anything: the VM is emulated. SMOKE=1: tiny runs (CI's check that
# the script still works).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="$(cd "${1:-$root/build}" && pwd)"
exec "$root/tools/vm/run.sh" --timeout 1200 --rxe 2 --env "SMOKE=${SMOKE:-0}" \
  -- "$root/bench/uc_bench_guest.sh" "$build"
