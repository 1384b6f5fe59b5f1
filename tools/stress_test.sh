#!/usr/bin/env bash
# tools/stress_test.sh [--vm] [--repeat N] [--jobs J] [--hogs H] [BUILD_DIR]
#
# Runs the test suite repeatedly on a deliberately busy machine, to find
# tests that pass only when the machine is idle: H busy-looping processes
# (default: one per core) run beside `ctest --repeat until-fail:N -j J`
# (defaults: N=20, J=4). Stops at the first failing repetition of a test and
# prints it. --vm runs the Soft-RoCE VM suite instead (label vm, serially,
# N defaults to 3). The build directory must be built already (tools/test.sh
# or tools/build.sh); default: build/. Do not rebuild BUILD_DIR meanwhile: a
# binary relinked under a running test fails it for nothing.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
vm=false
repeat=""
jobs=4
hogs="$(nproc)"
dir="$root/build"
while [ $# -gt 0 ]; do
  case "$1" in
    --vm) vm=true ;;
    --repeat) repeat="$2"; shift ;;
    --jobs) jobs="$2"; shift ;;
    --hogs) hogs="$2"; shift ;;
    -h | --help) sed -n '2,12p' "$0"; exit 0 ;;
    -*) echo "stress_test: unknown option $1 (see --help)" >&2; exit 2 ;;
    *) dir="$1" ;;
  esac
  shift
done
[ -f "$dir/CTestTestfile.cmake" ] \
  || { echo "stress_test: $dir is not a built meshpool tree; run tools/build.sh $dir first" >&2; exit 2; }

pids=()
stop_hogs() { [ ${#pids[@]} -eq 0 ] || kill "${pids[@]}" 2>/dev/null || true; }
trap stop_hogs EXIT
for _ in $(seq "$hogs"); do
  ( while :; do :; done ) &
  pids+=("$!")
done

start=$SECONDS
if $vm; then
  args=(-L vm --repeat "until-fail:${repeat:-3}")
else
  args=(-LE 'verbs|vm' -j "$jobs" --repeat "until-fail:${repeat:-20}")
fi
echo "stress_test: ctest ${args[*]} in $dir beside $hogs busy loops" >&2
status=0
(cd "$dir" && ctest --output-on-failure --timeout 900 "${args[@]}") || status=$?
echo "stress_test: $([ $status -eq 0 ] && echo passed || echo FAILED) after $((SECONDS - start)) s" >&2
exit $status
