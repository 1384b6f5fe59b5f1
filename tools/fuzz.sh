#!/usr/bin/env bash
# tools/fuzz.sh BUILD_DIR [SECONDS] [TARGET...]: runs the libFuzzer targets
# of a -DMESHPOOL_FUZZ=ON build (tests/fuzz/*_fuzz.cc; all, or those named)
# for SECONDS each (default 10), one after another. Each starts from its
# seed corpus tests/fuzz/corpus/NAME, which it never writes; what it finds
# goes to BUILD_DIR/fuzz/corpus/NAME and is reused by the next run. Prints
# a line per target (executions, per second, corpus size) and exits
# nonzero when any target crashed, leaked, hung or ran out of memory,
# leaving the input in BUILD_DIR/fuzz/crashes/ (replay it with
# BUILD_DIR/tests/fuzz_NAME FILE).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="$(cd "$1" && pwd)"; shift
seconds="${1:-10}"; [ $# -gt 0 ] && shift
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  for src in "$root"/tests/fuzz/*_fuzz.cc; do
    name="$(basename "$src" _fuzz.cc)"
    targets+=("$name")
  done
fi
mkdir -p "$build/fuzz/crashes"
failed=()
printf '%-18s %12s %10s %8s  %s\n' target executions per_second corpus result
for name in "${targets[@]}"; do
  bin="$build/tests/fuzz_$name"
  if [ ! -x "$bin" ]; then
    echo "fuzz: $bin is missing: build $build with -DMESHPOOL_FUZZ=ON" >&2
    exit 2
  fi
  if ! grep -qa LLVMFuzzerRunDriver "$bin"; then
    echo "fuzz: $bin is not a libFuzzer binary: configure $build with" \
         "-DCMAKE_CXX_COMPILER=clang++-14 -DMESHPOOL_FUZZ=ON" >&2
    exit 2
  fi
  corpus="$build/fuzz/corpus/$name"
  mkdir -p "$corpus"
  log="$build/fuzz/$name.log"
  result=ok
  # -timeout: one input may take this long (the tcp target waits for the
  # node's stall timeout); -rss_limit_mb: a parser that allocates by what
  # a length field claims is a finding.
  if ! "$bin" "$corpus" "$root/tests/fuzz/corpus/$name" \
      -max_total_time="$seconds" -timeout=25 -rss_limit_mb=2048 \
      -print_final_stats=1 -artifact_prefix="$build/fuzz/crashes/$name-" \
      >"$log" 2>&1; then
    result="FAILED (see $log)"
    failed+=("$name")
  fi
  execs="$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)"
  rate="$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)"
  size="$(find "$corpus" -type f | wc -l)"
  printf '%-18s %12s %10s %8s  %s\n' "$name" "${execs:-?}" "${rate:-?}" \
    "$size" "$result"
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz: ${failed[*]} failed; the inputs are in $build/fuzz/crashes/" >&2
  for name in "${failed[@]}"; do tail -40 "$build/fuzz/$name.log" >&2; done
  exit 1
fi
