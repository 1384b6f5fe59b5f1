#!/usr/bin/env bash
# bench/kv_compare.sh [BUILD_DIR] [-- KV_COMPARE_FLAGS...]
# The side-by-side KV-cache benchmark of issue 4: starts, on 127.0.0.1,
#   redis-server  (no persistence, maxmemory with noeviction: a full server
#                  fails the run instead of dropping keys),
#   memcached     (-I 4m for 2 MiB items, -M: fail instead of evicting),
#   a meshpool cluster (BUILD_DIR/tools/meshpool up),
#   iperf3 -s     (the loopback TCP ceiling),
# runs BUILD_DIR/bench/kv_compare against all of them with the same client
# concurrency, and stops everything on exit (also on Ctrl-C or failure).
# Missing packages (redis-server, memcached, iperf3) are installed with
# apt-get (through sudo when not root); installed ones are left alone.
# Default BUILD_DIR: <repo>/build. Build first:
#   cmake --build BUILD_DIR --target kv_compare    (builds tools/meshpool too)
# Environment (defaults in brackets):
#   THREADS [4]  BATCH [32]  SECONDS_PER [3] seconds per measurement
#   BLOCK_SIZES [16KiB,256KiB,2MiB]  WORKING_SET [256MiB] per block size
#   SYSTEMS [redis,memcached,meshpool,meshpool-shm] (meshpool: nodes over tcp
#   with --no-shm; meshpool-shm: a second cluster serving this host over
#   shared memory)
#   NODES [3] meshpool nodes, CAPACITY [2GiB] pool per node (resident: the
#   nodes fault their pools in), TRANSPORT [tcp] (tcp, verbs or auto)
#   SERVER_MEMORY_MB [4096]: redis maxmemory and memcached -m (caps; they
#   use what the working sets need)
#   SMOKE=1: one thread, batch 4, 1 s per measurement, 16 KiB blocks, an
#   8 MiB working set, one 128 MiB node, 64 MB servers (CI's check that the
#   script and kv_compare still work; the numbers mean nothing)
# Flags after `--` go to kv_compare as they are (they win over the above).
# Exit status: kv_compare's (0: every GET right; 1: a failure; 2: bad flags).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="$root/build"
if [ $# -gt 0 ] && [ "$1" != -- ]; then build="$1"; shift; fi
[ "${1:-}" = -- ] && shift
build="$(cd "$build" && pwd)"
bench="$build/bench/kv_compare"
meshpool="$build/tools/meshpool"
if [ ! -x "$bench" ] || [ ! -x "$meshpool" ]; then
  echo "kv_compare.sh: build it first: cmake --build $build --target kv_compare" >&2
  exit 2
fi

if [ "${SMOKE:-0}" = 1 ]; then
  : "${THREADS:=1}" "${BATCH:=4}" "${SECONDS_PER:=1}" "${BLOCK_SIZES:=16KiB}"
  : "${WORKING_SET:=8MiB}" "${NODES:=1}" "${CAPACITY:=128MiB}"
  : "${SERVER_MEMORY_MB:=64}"
fi
threads="${THREADS:-4}"
systems="${SYSTEMS:-redis,memcached,meshpool,meshpool-shm}"
mem_mb="${SERVER_MEMORY_MB:-4096}"
want() { [[ ",$systems," == *",$1,"* ]]; }

# ---- packages: install only what is missing ----
need=()
want redis && ! command -v redis-server > /dev/null && need+=(redis-server)
want memcached && ! command -v memcached > /dev/null && need+=(memcached)
command -v iperf3 > /dev/null || need+=(iperf3)
if [ ${#need[@]} -gt 0 ]; then
  sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  echo "kv_compare.sh: installing ${need[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get install -y --no-install-recommends "${need[@]}" > /dev/null ||
    { $sudo apt-get update > /dev/null &&
      $sudo apt-get install -y --no-install-recommends "${need[@]}" > /dev/null; }
fi

# ---- helpers ----
tmp="$(mktemp -d "${TMPDIR:-/tmp}/kv-compare.XXXXXX")"
pids=()
cleanup() {
  local p
  for p in "${pids[@]}"; do kill -TERM "$p" 2> /dev/null || true; done
  for p in "${pids[@]}"; do
    # Give each a few seconds (meshpool up stops its nodes), then SIGKILL.
    for _ in $(seq 50); do kill -0 "$p" 2> /dev/null || break; sleep 0.1; done
    kill -KILL "$p" 2> /dev/null || true
    wait "$p" 2> /dev/null || true
  done
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])' 2> /dev/null || echo $((20000 + RANDOM % 20000))
}

# Waits until 127.0.0.1:$1 accepts connections; $2 names the server, $3 its log.
wait_port() {
  for _ in $(seq 200); do
    if (exec 3<> "/dev/tcp/127.0.0.1/$1") 2> /dev/null; then return 0; fi
    sleep 0.1
  done
  echo "kv_compare.sh: $2 did not start listening on 127.0.0.1:$1; its log:" >&2
  cat "$3" >&2 || true
  exit 1
}

# ---- servers ----
args=(--threads "$threads" --systems "$systems")
[ -n "${BATCH:-}" ] && args+=(--batch "$BATCH")
[ -n "${SECONDS_PER:-}" ] && args+=(--seconds "$SECONDS_PER")
[ -n "${BLOCK_SIZES:-}" ] && args+=(--block-sizes "$BLOCK_SIZES")
[ -n "${WORKING_SET:-}" ] && args+=(--working-set "$WORKING_SET")

if want redis; then
  port="$(free_port)"
  redis-server --bind 127.0.0.1 --port "$port" --save '' --appendonly no \
    --maxmemory "${mem_mb}mb" --maxmemory-policy noeviction \
    --dir "$tmp" --logfile "$tmp/redis.log" --daemonize no &
  pids+=($!)
  wait_port "$port" redis-server "$tmp/redis.log"
  args+=(--redis "127.0.0.1:$port")
fi
if want memcached; then
  port="$(free_port)"
  # -M: an out-of-memory error instead of silent eviction. -U 0: no UDP.
  memcached -l 127.0.0.1 -p "$port" -U 0 -I 4m -m "$mem_mb" -M \
    -t "$threads" -c 1024 -u "$(id -un)" > "$tmp/memcached.log" 2>&1 &
  pids+=($!)
  wait_port "$port" memcached "$tmp/memcached.log"
  args+=(--memcached "127.0.0.1:$port")
fi
# Starts `meshpool up` with extra flags; sets $coordinator.
start_meshpool() {
  local log="$1"
  shift
  "$meshpool" up --port 0 --nodes "${NODES:-3}" --capacity "${CAPACITY:-2GiB}" \
    --transport "${TRANSPORT:-tcp}" "$@" > "$log" 2>&1 &
  pids+=($!)
  coordinator=""
  for _ in $(seq 600); do
    # "meshpool cluster up: coordinator HOST:PORT, N nodes x SIZE"
    coordinator="$(sed -n 's/^meshpool cluster up: coordinator \([^,]*\),.*/\1/p' \
      "$log")"
    [ -n "$coordinator" ] && break
    kill -0 "${pids[-1]}" 2> /dev/null || break
    sleep 0.1
  done
  if [ -z "$coordinator" ]; then
    echo "kv_compare.sh: the meshpool cluster did not come up; its log:" >&2
    cat "$log" >&2
    exit 1
  fi
}
if want meshpool; then
  # Over the network transport: the nodes do not offer shared memory.
  start_meshpool "$tmp/meshpool.log" --no-shm
  args+=(--coordinator "$coordinator")
fi
if want meshpool-shm; then
  # The same, with the nodes serving this host over shared memory.
  start_meshpool "$tmp/meshpool-shm.log"
  args+=(--shm-coordinator "$coordinator")
fi
port="$(free_port)"
iperf3 -s -B 127.0.0.1 -p "$port" > "$tmp/iperf3.log" 2>&1 &
pids+=($!)
wait_port "$port" "iperf3 -s" "$tmp/iperf3.log"
args+=(--iperf3 "127.0.0.1:$port")

echo "kv_compare.sh: $(redis-server --version 2> /dev/null | cut -d' ' -f1-3);" \
  "memcached $(memcached -V 2> /dev/null | cut -d' ' -f2);" \
  "$(iperf3 --version 2> /dev/null | head -1 | cut -d' ' -f1-2);" \
  "meshpool ${NODES:-3} nodes x ${CAPACITY:-2GiB} over ${TRANSPORT:-tcp};" \
  "$(nproc) CPUs"
rc=0
# The smoke run also writes the JSON report and checks that it parses.
smoke_json=""
if [ "${SMOKE:-0}" = 1 ]; then
  smoke_json="$tmp/kv_compare.json"
  args+=(--json "$smoke_json")
fi
# In the background, so a signal to this script runs the traps at once; the
# driver is stopped first.
"$bench" "${args[@]}" "$@" &
pids=("$!" "${pids[@]}")
wait "${pids[0]}" || rc=$?
if [ "$rc" -eq 0 ] && [ -n "$smoke_json" ] &&
  ! /usr/bin/python3 -m json.tool "$smoke_json" > /dev/null; then
  echo "kv_compare.sh: the --json report is not valid JSON:" >&2
  cat "$smoke_json" >&2
  rc=1
fi
if [ "$rc" -ne 0 ] && want meshpool; then
  echo "kv_compare.sh: the meshpool cluster's log:" >&2
  tail -n 40 "$tmp/meshpool.log" >&2 || true
fi
exit "$rc"
