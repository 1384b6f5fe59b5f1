#!/usr/bin/env bash
# tools/vm/run.sh [options] -- CMD [ARGS...]
# Runs CMD in a throwaway qemu VM with Soft-RoCE (rxe) devices; see README.md.
#   --timeout SECS   guest-side limit on CMD (default 600); exit 124 when hit
#   --cpus N         vCPUs (default 2)
#   --mem MB         guest memory (default 4096)
#   --env NAME=VAL   pass a variable to CMD (repeatable); MESHPOOL_*, GTEST_*
#                    and *SAN_OPTIONS pass through anyway
#   --rxe N          1: rxe0 on a dummy netdev (default); 2: rxe0/rxe1 on the
#                    two ends of a veth pair
#   --rw DIR         also share DIR read-write (repeatable); the repository
#                    and $MESHPOOL_VM_DIR always are
# CMD runs in the current directory, which must exist in the guest. Exit
# status: CMD's own; 124 when --timeout fired; 125 when the VM failed.
# MESHPOOL_VM_VERBOSE=1 prints boot and run times to stderr;
# MESHPOOL_VM_KEEP=1 keeps the control folder (console.log) in $TMPDIR.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
vm_dir="${MESHPOOL_VM_DIR:-$repo/build-vm}"
readonly HOST_MARGIN_S=120  # boot + shutdown allowance on top of --timeout

vm_fail() { echo "vm: $*" >&2; exit 125; }
usage() {
  sed -n '2,18s/^# \{0,1\}//p' "$0" >&2
  exit 125
}

timeout_s=600 cpus=2 mem=4096 rxe=1
envs=() rw_paths=("$repo" "$vm_dir")  # the guest needs $vm_dir's modules
while [ $# -gt 0 ]; do
  case "$1" in
    --timeout | --cpus | --mem | --rxe)
      [[ ${2:-} =~ ^[1-9][0-9]*$ ]] || vm_fail "$1 needs a positive integer, got '${2:-}'"
      case "$1" in
        --timeout) timeout_s=$2 ;;
        --cpus) cpus=$2 ;;
        --mem) mem=$2 ;;
        --rxe) rxe=$2 ;;
      esac
      shift 2 ;;
    --env)
      [[ ${2:-} =~ ^[A-Za-z_][A-Za-z0-9_]*= ]] || vm_fail "--env needs NAME=VALUE, got '${2:-}'"
      envs+=("$2"); shift 2 ;;
    --rw)
      [ -d "${2:-}" ] || vm_fail "--rw needs an existing directory, got '${2:-}'"
      rw_paths+=("$2"); shift 2 ;;
    --) shift; break ;;
    -h | --help) usage ;;
    *) vm_fail "unknown option '$1' (the command goes after --)" ;;
  esac
done
[ $# -gt 0 ] || vm_fail "no command given: tools/vm/run.sh [options] -- CMD [ARGS...]"
[[ $rxe == [12] ]] || vm_fail "--rxe must be 1 or 2, got $rxe"
command -v qemu-system-x86_64 >/dev/null || vm_fail "qemu-system-x86_64 not found: run tools/setup.sh"

"$here/prepare.sh" || vm_fail "preparing the VM failed (see above)"
# shellcheck source=/dev/null
source "$vm_dir/current.env"  # KVER KERNEL INITRD MODULES

ctl="$(mktemp -d "${TMPDIR:-/tmp}/meshpool-vm.XXXXXX")"
qemu_pid="" cat_pid=""
cleanup() {
  if [ -n "$qemu_pid" ]; then kill -TERM "$qemu_pid" 2>/dev/null || true; fi
  if [ -n "$cat_pid" ]; then kill -TERM "$cat_pid" 2>/dev/null || true; fi
  [ -n "${MESHPOOL_VM_KEEP:-}" ] || rm -rf "$ctl"
}
trap cleanup EXIT
trap 'vm_fail "interrupted"' INT TERM HUP

# Read-write shares: skip one that lies inside another (it is visible there).
: > "$ctl/rw_paths"
virtfs=()
canonical=()
for path in "${rw_paths[@]}"; do canonical+=("$(cd "$path" && pwd -P)"); done
for path in "${canonical[@]}"; do
  [[ $path != *$'\n'* ]] || vm_fail "share path with a newline: $path"
  inside=false
  for other in "${canonical[@]}"; do
    if [ "$other" != "$path" ] && [[ $path/ == "$other"/* ]]; then inside=true; fi
  done
  if $inside || grep -qxF "$path" "$ctl/rw_paths"; then continue; fi
  virtfs+=(-virtfs "local,path=$path,mount_tag=rw$(wc -l < "$ctl/rw_paths"),security_model=none,multidevs=remap")
  echo "$path" >> "$ctl/rw_paths"
done

echo "$here/guest.sh" > "$ctl/guest_script"
{
  printf 'KVER=%q\nMODULES=%q\n' "$KVER" "$MODULES"
  printf 'TIMEOUT=%q\nRXE=%q\nWORKDIR=%q\n' "$timeout_s" "$rxe" "$PWD"
  printf 'CMD=('; printf '%q ' "$@"; printf ')\n'
} > "$ctl/config"
{
  for var in $(compgen -e); do
    case "$var" in
      MESHPOOL_* | GTEST_* | *SAN_OPTIONS) printf 'export %s=%q\n' "$var" "${!var}" ;;
    esac
  done
  for kv in "${envs[@]}"; do printf 'export %s=%q\n' "${kv%%=*}" "${kv#*=}"; done
} > "$ctl/env"

# The guest's console (kernel messages) goes to a file, shown on failure.
# CMD's output comes through the virtio port "meshpool.out" and a FIFO to a
# cat that writes to our own stdout (so its file offset stays shared with
# our caller's, unlike a file qemu would open itself).
mkfifo "$ctl/out"
cat "$ctl/out" &
cat_pid=$!

start_ns=$(date +%s%N)
host_limit=$((timeout_s + HOST_MARGIN_S))
timeout --kill-after=10 "$host_limit" qemu-system-x86_64 \
  -nodefaults -no-user-config -display none -no-reboot \
  -accel "${MESHPOOL_VM_ACCEL:-tcg,thread=multi}" -cpu max -smp "$cpus" -m "$mem" \
  -kernel "$KERNEL" -initrd "$INITRD" \
  -append "console=ttyS0 quiet loglevel=3 panic=-1" \
  -serial "file:$ctl/console.log" \
  -device virtio-serial-pci \
  -chardev "file,id=out,path=$ctl/out" \
  -device virtserialport,chardev=out,name=meshpool.out \
  -virtfs "local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap" \
  -virtfs "local,path=$ctl,mount_tag=ctl,security_model=none,multidevs=remap" \
  "${virtfs[@]}" </dev/null &
qemu_pid=$!
qemu_rc=0
wait "$qemu_pid" || qemu_rc=$?
qemu_pid=""
# Let cat see end-of-file even if qemu never opened the FIFO; then drain it.
exec 4<>"$ctl/out"
exec 4>&-
wait "$cat_pid" || true
cat_pid=""
wall_s=$(( ($(date +%s%N) - start_ns) / 1000000 ))

if [ "${MESHPOOL_VM_VERBOSE:-0}" = 1 ] && [ -f "$ctl/ready" ]; then
  echo "vm: command started at guest uptime $(cat "$ctl/ready") s;" \
       "total wall time $((wall_s / 1000)).$(printf '%03d' $((wall_s % 1000))) s" >&2
fi
console_tail() {  # the guest kernel's last words, if any
  local lines
  lines="$(grep -v 'reboot: Power down' "$ctl/console.log" 2>/dev/null | tail -n 20 || true)"
  if [ -n "$lines" ]; then
    echo "vm: last guest console lines:" >&2
    sed 's/^/vm:   /' <<<"$lines" >&2
  fi
}
if [ -s "$ctl/vm_error" ]; then
  echo "vm: $(cat "$ctl/vm_error")" >&2
  console_tail
  exit 125
fi
if [ "$qemu_rc" -eq 124 ] || [ "$qemu_rc" -eq 137 ]; then
  console_tail
  vm_fail "qemu ran past the host-side limit of $host_limit s (guest hung?)"
fi
if [ ! -s "$ctl/exit_status" ]; then
  console_tail
  vm_fail "the guest reported no exit status (qemu exited with $qemu_rc; VM did not boot?)"
fi
exit "$(cat "$ctl/exit_status")"
