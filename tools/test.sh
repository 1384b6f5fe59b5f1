#!/usr/bin/env bash
# The second README command: install, build, and pass the whole test suite,
# once in a normal build and once under AddressSanitizer + UBSan (clang),
# then run every fuzz target for a bounded time.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
"$root/tools/setup.sh"

# Tests labelled `verbs` need an RDMA device: this host has none, so they run
# only inside the Soft-RoCE VM, through the tests labelled `vm` (one VM boot
# each, run one at a time after the rest).
run_suite() {
  local dir="$1"; shift
  echo "=== meshpool tests: $dir ===" >&2
  "$root/tools/build.sh" "$dir" "$@"
  (cd "$dir" && ctest --output-on-failure --timeout 600 -j 2 -LE 'verbs|vm')
}

run_suite "$root/build" -DCMAKE_BUILD_TYPE=RelWithDebInfo
echo "=== meshpool verbs tests in the Soft-RoCE VM: $root/build ===" >&2
# Verbose: the CI log shows every verbs test the VM ran and the count line
# ("verbs tests run in VM: N passed of N").
(cd "$root/build" && ctest --output-on-failure --no-tests=error -L vm -V)
# Sanitized: built by clang (a second compiler's view) with libFuzzer's
# coverage, so the fuzz targets in it are real fuzzers; no benchmarks, and
# optimised enough that the suite stays quick. Then every fuzz target runs
# for a bounded time from its seed corpus (tools/fuzz.sh).
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
run_suite "$root/build-asan" -DCMAKE_CXX_COMPILER=clang++-14 \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMESHPOOL_SANITIZE=ON -DMESHPOOL_FUZZ=ON \
  -DMESHPOOL_BUILD_BENCH=OFF
echo "=== meshpool fuzzing: ${MESHPOOL_FUZZ_SECONDS:-10} s per target ===" >&2
"$root/tools/fuzz.sh" "$root/build-asan" "${MESHPOOL_FUZZ_SECONDS:-10}"
echo "meshpool: all tests passed (normal build, verbs in the VM, ASan+UBSan," \
     "fuzzing)" >&2
