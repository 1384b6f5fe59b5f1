#!/usr/bin/env bash
# bench/verbs_bench.sh [BUILD_DIR]: boots the Soft-RoCE VM once and runs, in
# that one boot, perftest and meshpool over verbs side by side
# (bench/verbs_bench_guest.sh), printing the table of ratios that
# docs/BENCHMARKS.md records. Only ratios mean anything: the VM is emulated.
# SMOKE=1: tiny runs (CI's check that the script still works).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="$(cd "${1:-$root/build}" && pwd)"
exec "$root/tools/vm/run.sh" --timeout 1200 --env "SMOKE=${SMOKE:-0}" \
  -- "$root/bench/verbs_bench_guest.sh" "$build"
