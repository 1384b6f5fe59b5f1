#!/usr/bin/env bash
# bench/kv_instructions.sh [BUILD_DIR]: client instructions per 4 KiB GET
# and PUT, counted with callgrind (no timing: the count does not depend on
# how busy the machine is).
#
# Starts a one-node cluster (tcp on loopback, --no-shm so the client takes
# the network path), then runs bench/kv_instructions under
# `valgrind --tool=callgrind --instr-atstart=no`: it warms up uncounted,
# counts OPS GETs and dumps, then OPS PUTs and dumps. Prints the
# instructions per operation (every client thread included) and, with
# TOP=N, the N functions that cost the most in each (self cost).
#
# SIZE (4096), OPS (2000), KEYS (100), TOP (0). SMOKE=1: OPS=20 KEYS=5 (CI
# runs this so the script cannot rot; its numbers mean little).
set -euo pipefail
build="${1:-$(cd "$(dirname "$0")/.." && pwd)/build}"
meshpool="$build/tools/meshpool"
bench="$build/bench/kv_instructions"
for f in "$meshpool" "$bench"; do
  if [[ ! -x "$f" ]]; then
    echo "kv_instructions.sh: build it first: cmake --build $build (no $f)" >&2
    exit 1
  fi
done
if ! command -v valgrind > /dev/null; then
  echo "kv_instructions.sh: needs valgrind (tools/setup.sh installs it)" >&2
  exit 1
fi
if [[ "${SMOKE:-0}" = 1 ]]; then
  OPS=20 KEYS=5
fi
size="${SIZE:-4096}"
ops="${OPS:-2000}"
keys="${KEYS:-100}"
top="${TOP:-0}"

work="$(mktemp -d /tmp/meshpool-instructions.XXXXXX)"
pid=""
cleanup() {
  if [[ -n "$pid" ]]; then kill -INT "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

"$meshpool" up --nodes 1 --capacity 64MiB --port 0 --transport tcp --no-shm \
  > "$work/cluster.log" 2>&1 &
pid=$!
coordinator=""
for _ in $(seq 300); do
  coordinator="$(sed -n 's/.*cluster up: coordinator \([^,]*\),.*/\1/p' "$work/cluster.log")"
  [[ -n "$coordinator" ]] && break
  sleep 0.1
done
if [[ -z "$coordinator" ]]; then
  echo "kv_instructions.sh: the cluster did not come up; its log:" >&2
  cat "$work/cluster.log" >&2
  exit 1
fi

valgrind --tool=callgrind --instr-atstart=no \
  --callgrind-out-file="$work/callgrind.out" \
  "$bench" --coordinator="$coordinator" --value-size="$size" --ops="$ops" \
  --keys="$keys" > "$work/bench.out" 2> "$work/valgrind.log" || {
  echo "kv_instructions.sh: the counted run failed:" >&2
  cat "$work/valgrind.log" "$work/bench.out" >&2
  exit 1
}

# Each dump is its own file (callgrind.out.N), its trigger in "desc:" and
# its instruction count in "summary:".
declare -A per_op
for f in "$work"/callgrind.out.*; do
  what="$(sed -n 's/^desc: Trigger: Client Request: //p' "$f")"
  total="$(sed -n 's/^summary: //p' "$f")"
  [[ -n "$what" && -n "$total" ]] || continue
  per_op[$what]=$(( total / ops ))
  if (( top > 0 )); then
    echo "== $what: the $top costliest functions (self, all $ops ops) =="
    callgrind_annotate --threshold=100 "$f" 2> /dev/null \
      | sed -n '/^ *Ir /,$p' | sed -n "3,$(( top + 2 ))p"
  fi
done
for what in get put; do
  if [[ -z "${per_op[$what]:-}" ]]; then
    echo "kv_instructions.sh: no '$what' dump in the callgrind output" >&2
    exit 1
  fi
done
printf "client instructions per %s-byte op (%s ops, %s keys, tcp, one node):\n" \
  "$size" "$ops" "$keys"
printf "  GET %8d\n  PUT %8d\n" "${per_op[get]}" "${per_op[put]}"
