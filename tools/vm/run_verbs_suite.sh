#!/usr/bin/env bash
# tools/vm/run_verbs_suite.sh BUILD_DIR: runs BUILD_DIR's tests labelled
# "verbs" inside the Soft-RoCE VM, with MESHPOOL_REQUIRE_VERBS=1 so that a
# test that finds no RDMA device fails instead of skipping. The VM has two
# devices (run.sh --rxe 2: rxe0 and rxe1 on a veth pair), so the tests of
# per-peer device choice and of a pulled cable have a second device. Prints
# "verbs tests run in VM: P passed of N"; fails when N is 0.
#
# A test that fails runs once more, and every test that passed only then is
# named in a WARNING. Soft-RoCE under qemu's TCG stalls rarely: a request
# whose completion does not come within the op timeout (5 s). Seen in a
# CI run on 2026-12-07 (verbs.WeightsCliTest, an unfenced READ) and, with
# IBV_SEND_FENCE set, once in about 10,000 PUTs of bench/verbs_bench.sh
# (docs/BENCHMARKS.md); the cause is not known. A test that fails twice
# fails the suite.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
readonly LABEL=verbs
readonly GUEST_TIMEOUT_S=1300  # the CTest test allows 1500 s in all
readonly RXE_DEVICES=2
readonly ATTEMPTS=2  # per test: a failed test runs once more (above)

[ $# -eq 1 ] && [ -f "$1/CTestTestfile.cmake" ] \
  || { echo "usage: $0 BUILD_DIR (a configured meshpool build)" >&2; exit 2; }
build="$(cd "$1" && pwd -P)"
log="$(mktemp)"
trap 'rm -f "$log"' EXIT

cd "$build"
rc=0
"$here/run.sh" --timeout "$GUEST_TIMEOUT_S" --rxe "$RXE_DEVICES" --rw "$build" \
  --env MESHPOOL_REQUIRE_VERBS=1 \
  -- ctest --test-dir "$build" -L "^$LABEL\$" --output-on-failure \
  --repeat "until-pass:$ATTEMPTS" 2>&1 | tee "$log" \
  || rc=${PIPESTATUS[0]}

# ctest's summary: "100% tests passed, 0 tests failed out of 7".
summary="$(grep -E '^[0-9]+% tests passed, [0-9]+ tests? failed out of [0-9]+' "$log" | tail -n 1 || true)"
if [ -n "$summary" ]; then
  failed="$(sed -E 's/.* ([0-9]+) tests? failed out of ([0-9]+).*/\1/' <<<"$summary")"
  total="$(sed -E 's/.* failed out of ([0-9]+).*/\1/' <<<"$summary")"
elif [ "$rc" -eq 0 ]; then
  failed=0 total=0  # ctest said "No tests were found!!!"
else
  echo "verbs suite in VM failed before ctest's summary (exit status $rc)" >&2
  exit "$rc"
fi
echo "$LABEL tests run in VM: $((total - failed)) passed of $total"
# Tests with a failed run that are not among the final failures passed on
# their second run: say which, loudly.
# (A test that skips is run again too, by ctest: it is not a failure.)
failed_once="$(sed -nE 's/.*Test +#[0-9]+: ([^ ]+) .*\*\*\*(Failed|Timeout|Exception).*/\1/p' "$log" | sort -u)"
failed_last="$(sed -n '/The following tests FAILED:/,$p' "$log" |
  sed -nE 's/^[[:space:]]*[0-9]+ - ([^ ]+) .*/\1/p' | sort -u)"
flaky="$(comm -23 <(printf '%s\n' "$failed_once") <(printf '%s\n' "$failed_last") | sed '/^$/d')"
if [ -n "$flaky" ]; then
  echo "WARNING: passed only on a second run (see this script's header):" >&2
  sed 's/^/  /' <<<"$flaky" >&2
fi
if [ "$total" -eq 0 ]; then
  echo "no tests labelled $LABEL: $build has none (are the verbs tests built?)" >&2
  exit 1
fi
if [ "$rc" -eq 0 ] && [ "$failed" -ne 0 ]; then rc=1; fi
exit "$rc"
