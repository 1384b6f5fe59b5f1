#!/usr/bin/env bash
# bench/tls_cost.sh [BUILD_DIR]: what TLS on the control plane and tokens on
# the tcp data plane cost, side by side in one run.
#
# Starts two local clusters (a coordinator and 3 nodes each, tcp on
# loopback, --no-shm so that clients really use tcp): one plain, one with
# the certificates of `meshpool certs init` (its nodes then admit a data
# connection only with a token from their authenticated handshake). Then,
# alternating between the two ROUNDS times:
#   * `meshpool bench` at SIZE (256KiB), batch 16, 4 threads, 90 % GETs, for
#     DURATION (5s): the data path, whose requests are the same in both;
#   * CONNECTS runs of `meshpool get` of one key, each a fresh process that
#     connects to the coordinator (the map), asks the node where its pool
#     is and opens a data connection (with TLS: two TLS handshakes, with the
#     coordinator and the node, a token, and the tcp hello) before one
#     GET: the set-up cost.
# Prints each run, then the medians and the TLS / plain ratios.
#
# SMOKE=1: one round of 1 s and 3 connects at 16 KiB (CI runs this so the
# script cannot rot; its numbers mean nothing).
set -euo pipefail
build="${1:-$(cd "$(dirname "$0")/.." && pwd)/build}"
meshpool="$build/tools/meshpool"
if [[ ! -x "$meshpool" ]]; then
  echo "tls_cost.sh: build it first: cmake --build $build --target meshpool" >&2
  exit 1
fi
if [[ "${SMOKE:-0}" = 1 ]]; then
  ROUNDS=1 DURATION=1s CONNECTS=3 SIZE=16KiB
fi
rounds="${ROUNDS:-3}"
duration="${DURATION:-5s}"
connects="${CONNECTS:-20}"
size="${SIZE:-256KiB}"

work="$(mktemp -d /tmp/meshpool-tls-cost.XXXXXX)"
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill -INT "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT

"$meshpool" certs init "$work/certs" --nodes 3 > /dev/null

# start_cluster NAME [ARGS...]: starts `meshpool up` on a free port and
# sets address[NAME] to the coordinator's once the cluster is up. (Not in a
# subshell: `pids` must learn the process, or cleanup would leave it.)
declare -A address
start_cluster() {
  local name="$1"; shift
  local log="$work/$name.log"
  "$meshpool" up --nodes 3 --capacity 256MiB --port 0 --transport tcp \
    --no-shm "$@" > "$log" 2>&1 &
  pids+=($!)
  for _ in $(seq 300); do
    if grep -q "cluster up" "$log"; then
      address[$name]="$(sed -n 's/.*cluster up: coordinator \([^,]*\),.*/\1/p' "$log")"
      return 0
    fi
    sleep 0.1
  done
  echo "tls_cost.sh: the $name cluster did not come up; its log:" >&2
  cat "$log" >&2
  return 1
}

start_cluster plain
start_cluster tls --tls-dir "$work/certs"
plain="${address[plain]}"
tls="${address[tls]}"
echo "plain cluster: $plain   tls cluster: $tls" >&2

# client NAME ARGS...: a meshpool client command against cluster NAME.
client() {
  local name="$1"; shift
  if [[ "$name" = tls ]]; then
    MESHPOOL_COORDINATOR="$tls" MESHPOOL_TLS_DIR="$work/certs" \
      "$meshpool" "$@"
  else
    MESHPOOL_COORDINATOR="$plain" "$meshpool" "$@"
  fi
}

head -c 4096 /dev/urandom > "$work/value"
for name in plain tls; do client "$name" put tls-cost-key "$work/value"; done

median() { sort -n | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }

declare -A gbps p50 connect_ms
printf "%-6s %-6s %10s %8s %14s\n" round setup "GB/s" p50_us "connect_ms(med)"
for round in $(seq "$rounds"); do
  for name in plain tls; do
    out="$(client "$name" bench --value-size "$size" --batch 16 --threads 4 \
             --read-fraction 0.9 --duration "$duration" --keys 64)"
    echo "$out" | grep -q "errors 0  corrupt values 0" || {
      echo "tls_cost.sh: the $name run failed:" >&2; echo "$out" >&2; exit 1; }
    g="$(echo "$out" | sed -n 's/.*throughput \([0-9.]*\) GB\/s.*/\1/p')"
    p="$(echo "$out" | sed -n 's/.*p50 \([0-9]*\)us.*/\1/p')"
    times=()
    for _ in $(seq "$connects"); do
      start=$(date +%s%N)
      client "$name" get tls-cost-key -o "$work/got" > /dev/null
      end=$(date +%s%N)
      cmp -s "$work/value" "$work/got" || {
        echo "tls_cost.sh: $name returned other bytes" >&2; exit 1; }
      times+=("$(( (end - start) / 1000 ))")
    done
    c="$(printf "%s\n" "${times[@]}" | median)"
    gbps[$name]+="$g "
    p50[$name]+="$p "
    connect_ms[$name]+="$c "
    awk -v r="$round" -v n="$name" -v g="$g" -v p="$p" -v c="$c" \
      'BEGIN { printf "%-6s %-6s %10s %8s %14.2f\n", r, n, g, p, c / 1000 }'
  done
done

med() { tr ' ' '\n' | grep -v '^$' | median; }
gp="$(echo "${gbps[plain]}" | med)" gt="$(echo "${gbps[tls]}" | med)"
pp="$(echo "${p50[plain]}" | med)" pt="$(echo "${p50[tls]}" | med)"
cp_="$(echo "${connect_ms[plain]}" | med)" ct="$(echo "${connect_ms[tls]}" | med)"
awk -v rounds="$rounds" -v size="$size" -v gp="$gp" -v gt="$gt" \
    -v pp="$pp" -v pt="$pt" -v cp="$cp_" -v ct="$ct" 'BEGIN {
  printf "medians over %d round(s), %s values:\n", rounds, size
  printf "  throughput  plain %s GB/s  tls %s GB/s  tls/plain %.3f\n", gp, gt, gt / (gp > 0 ? gp : 1)
  printf "  p50         plain %s us  tls %s us  tls/plain %.3f\n", pp, pt, pt / (pp > 0 ? pp : 1)
  printf "  connect+get plain %.2f ms  tls %.2f ms  difference %.2f ms\n",
         cp / 1000, ct / 1000, (ct - cp) / 1000
}'
