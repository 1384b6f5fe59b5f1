#!/usr/bin/env bash
# bench/weights_bench.sh [--vm] [BUILD_DIR] [-- WEIGHTS_BENCH_FLAGS...]
# Runs BUILD_DIR/bench/weights_bench (default BUILD_DIR: <repo>/build): in
# one run it starts a local cluster (coordinator + 3 memory nodes), measures
# the raw one-sided WRITE/READ bandwidth of the nodes' memory, then
# LoadSafetensors and ReadTensor of a generated multi-file model, checks
# every byte and prints one table with the ratios and targets (load >= 0.7 x
# raw write, read >= 0.85 x raw read).
#   default: TCP on loopback, a 2 GiB model in 4 shards (the client's load
#            and reads over TCP too: add `-- --shm 1` for shared memory).
#   --vm:    inside the Soft-RoCE VM (tools/vm/run.sh) over verbs on rxe0,
#            GID index 1, a 256 MiB model (the VM is small and emulated:
#            only the ratios mean anything there). The raw phase uses one
#            endpoint per node with 2 x 4 MiB in flight: with the default 4
#            x 16 the emulated rxe0 drops the QPs (transport retry counter
#            exceeded on the first request).
# Environment: MODEL_BYTES, FILES, PARALLEL, THREADS override the model and
# the concurrency; VM_TIMEOUT (default 1200 s) bounds the VM run. SMOKE=1:
# a 16 MiB model in 2 files, 2 threads (CI's check that the script and the
# bench still work; its numbers mean nothing). Flags
# after `--` go to weights_bench as they are (they win over the above).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
vm=false
if [ "${1:-}" = --vm ]; then vm=true; shift; fi
build="$root/build"
if [ $# -gt 0 ] && [ "$1" != -- ]; then build="$1"; shift; fi
[ "${1:-}" = -- ] && shift
build="$(cd "$build" && pwd)"
bench="$build/bench/weights_bench"
if [ ! -x "$bench" ] || [ ! -x "$build/tools/meshpool" ]; then
  echo "weights_bench.sh: build it first: cmake --build $build --target weights_bench" >&2
  exit 2
fi

if [ "${SMOKE:-0}" = 1 ]; then
  : "${MODEL_BYTES:=16MiB}" "${FILES:=2}" "${PARALLEL:=2}" "${THREADS:=2}"
fi
if ! $vm; then
  exec "$bench" --transport tcp --model-bytes "${MODEL_BYTES:-2GiB}" \
    --files "${FILES:-4}" --parallel "${PARALLEL:-4}" \
    --threads "${THREADS:-4}" "$@"
fi
cd "$root"  # run.sh needs a working directory the guest sees
exec "$root/tools/vm/run.sh" --timeout "${VM_TIMEOUT:-1200}" -- \
  "$bench" --transport verbs --device rxe0 --gid-index 1 \
  --model-bytes "${MODEL_BYTES:-256MiB}" --files "${FILES:-4}" \
  --parallel "${PARALLEL:-4}" --threads "${THREADS:-4}" \
  --raw-lanes 1 --raw-depth 2 "$@"
