#!/bin/bash
# Stage 2 of the meshpool VM: PID 1 after switch_root, run by the host's own
# bash from the shared host root. Mounts the usual pseudo file systems, loads
# Soft-RoCE, creates the rxe devices, runs the command under `timeout`, and
# reports through the control share (/run/meshpool-vm, see run.sh):
#   ready        guest uptime (s) when the command starts
#   exit_status  the command's exit status (124: its timeout fired)
#   vm_error     why the guest could not run the command at all
set -uo pipefail
ctl=/run/meshpool-vm
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
# shellcheck source=/dev/null
source "$ctl/config"  # KVER MODULES TIMEOUT RXE WORKDIR CMD

finish() {
  sync
  busybox poweroff -f
  echo o > /proc/sysrq-trigger
  sleep 60
}
fail() {
  echo "$*" > "$ctl/vm_error"
  finish
}

# The command's output: virtio port "meshpool.out", which run.sh streams to
# its stdout. A plain character device: no tty newline translation.
port=""
for name in /sys/class/virtio-ports/*/name; do
  if [ "$(cat "$name")" = meshpool.out ]; then
    port="/dev/$(basename "$(dirname "$name")")"
  fi
done
[ -c "$port" ] || fail "virtio port meshpool.out not found in the guest"
exec >"$port" 2>&1 </dev/null

mkdir -p /dev/shm /dev/pts
mount -t tmpfs -o mode=1777 tmpfs /dev/shm || fail "mounting /dev/shm failed"
mount -t devpts devpts /dev/pts || fail "mounting /dev/pts failed"
mkdir -p "/lib/modules/$KVER"
mount --bind "$MODULES" "/lib/modules/$KVER" || fail "bind-mounting $MODULES failed"
modprobe -a rdma_rxe crc32_generic veth || fail "modprobe rdma_rxe crc32_generic veth failed"
# Loaded plainly, `dummy` creates dummy0 by itself (numdummies defaults to
# 1); systemd's /lib/modprobe.d/systemd.conf sets numdummies=0, but a host
# root without systemd (a container, a minimal install) lacks it, and our
# `ip link add dummy0` then met "File exists". Ask for none ourselves.
modprobe dummy numdummies=0 || fail "modprobe dummy numdummies=0 failed"
ip link set lo up
hostname meshpool-vm

# rxe device $1 on netdev $2: create it and wait until its port is ACTIVE.
add_rxe() {
  local state="/sys/class/infiniband/$1/ports/1/state"
  rdma link add "$1" type rxe netdev "$2" || fail "rdma link add $1 type rxe netdev $2 failed"
  for _ in $(seq 100); do
    grep -q ACTIVE "$state" 2>/dev/null && return 0
    sleep 0.1
  done
  fail "$1 port did not become ACTIVE ($(cat "$state" 2>/dev/null))"
}

case "$RXE" in
  1)
    ip link add dummy0 type dummy \
      || fail "creating dummy0 failed ($(ip -brief link show dummy0 2>&1))"
    ip addr add 10.77.0.1/24 dev dummy0
    ip link set dummy0 up
    add_rxe rxe0 dummy0
    export MESHPOOL_VM_RXE0_ADDR=10.77.0.1
    ;;
  2)
    # Two "NICs" on a veth pair. Both addresses are local, so by default
    # traffic between them would take lo; rules ahead of the local table
    # send locally generated packets for the other end out of the veth.
    ip link add ve0 type veth peer name ve1 || fail "creating veth pair ve0/ve1 failed"
    ip addr add 10.77.0.1/24 dev ve0
    ip addr add 10.77.0.2/24 dev ve1
    for c in all default ve0 ve1; do
      sysctl -qw "net.ipv4.conf.$c.accept_local=1" "net.ipv4.conf.$c.rp_filter=0"
    done
    ip link set ve0 up
    ip link set ve1 up
    ip rule add pref 100 lookup local
    ip rule del pref 0 lookup local
    ip rule add pref 10 iif lo to 10.77.0.2 lookup 10
    ip rule add pref 11 iif lo to 10.77.0.1 lookup 11
    ip route add 10.77.0.2 dev ve0 src 10.77.0.1 table 10
    ip route add 10.77.0.1 dev ve1 src 10.77.0.2 table 11
    ip neigh replace 10.77.0.2 dev ve0 lladdr "$(cat /sys/class/net/ve1/address)" nud permanent
    ip neigh replace 10.77.0.1 dev ve1 lladdr "$(cat /sys/class/net/ve0/address)" nud permanent
    add_rxe rxe0 ve0
    add_rxe rxe1 ve1
    export MESHPOOL_VM_RXE0_ADDR=10.77.0.1 MESHPOOL_VM_RXE1_ADDR=10.77.0.2
    ;;
  *) fail "unsupported rxe count $RXE" ;;
esac

cd "$WORKDIR" 2>/dev/null \
  || fail "working directory $WORKDIR is not visible in the guest (the guest's /tmp is its own tmpfs)"
ulimit -l unlimited

# The command sees only what run.sh passed, plus a sane base.
for var in $(compgen -e); do
  case "$var" in PATH | MESHPOOL_VM_RXE*) ;; *) unset "$var" ;; esac
done
export HOME=/root TERM=dumb LANG=C.UTF-8
# shellcheck source=/dev/null
source "$ctl/env"

cut -d' ' -f1 /proc/uptime > "$ctl/ready"
start=$SECONDS
timeout --kill-after=10 "$TIMEOUT" "${CMD[@]}"
status=$?
# Killed by the --kill-after SIGKILL: still the timeout's doing.
if [ "$status" -eq 137 ] && [ $((SECONDS - start)) -ge "$TIMEOUT" ]; then
  status=124
fi
echo "$status" > "$ctl/exit_status"
finish
