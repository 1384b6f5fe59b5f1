#!/usr/bin/env bash
# bench/placement_sim.sh [BUILD_DIR]: routing, bucket-table and map-change
# costs at 3 ... 4,096 simulated nodes with 100,000 keys (one process, no
# network; see bench/placement_sim.cc for the columns).
#
# NODES (3,16,64,256,1024,4096), KEYS (100000), SEED (random, printed).
# SMOKE=1: NODES=3,16 KEYS=2000 (CI runs this so the script cannot rot; its
# numbers mean little).
set -euo pipefail
build="${1:-$(cd "$(dirname "$0")/.." && pwd)/build}"
sim="$build/bench/placement_sim"
if [[ ! -x "$sim" ]]; then
  echo "placement_sim.sh: build it first: cmake --build $build (no $sim)" >&2
  exit 1
fi
if [[ "${SMOKE:-0}" = 1 ]]; then
  NODES=3,16 KEYS=2000
fi
args=(--nodes="${NODES:-3,16,64,256,1024,4096}" --keys="${KEYS:-100000}")
if [[ -n "${SEED:-}" ]]; then args+=(--seed="$SEED"); fi
exec "$sim" "${args[@]}"
