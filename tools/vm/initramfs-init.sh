#!/bin/busybox sh
# shellcheck shell=dash disable=SC2093
# Stage 1 of the meshpool VM: /init of the initramfs (busybox only).
# Builds the guest's root: the host's / over 9p (read-only) under a tmpfs
# overlay, the host's read-write shares at their host paths, and run.sh's
# control folder at /run/meshpool-vm; then hands over to guest.sh (stage 2)
# run by the host's own bash.
/bin/busybox --install -s /bin
export PATH=/bin

mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
exec </dev/console >/dev/console 2>&1

fail() {
  echo "vm-init: $*"
  if grep -q ' /ctl 9p ' /proc/mounts; then echo "$*" > /ctl/vm_error; fi
  sync
  poweroff -f
}

while read -r ko; do
  insmod "/modules/$ko" || fail "insmod $ko failed"
done < /modules/order

# Large msize: fewer round trips. mmap cache: coherent enough for files the
# host and the guest both touch, and lets the guest mmap (execute) them.
p9="trans=virtio,version=9p2000.L,msize=512000"
mount -t 9p -o "$p9,cache=mmap" ctl /ctl || fail "mounting the control share failed"
read -r guest_script < /ctl/guest_script || fail "control share has no guest_script"

# The host root changes little while a VM runs: cache it fully.
mount -t 9p -o "ro,$p9,cache=loose" hostroot /host || fail "mounting the host root over 9p failed"
mount -t tmpfs -o mode=755 tmpfs /rw || fail "tmpfs for the overlay failed"
mkdir -p /rw/upper /rw/work
mount -t overlay -o lowerdir=/host,upperdir=/rw/upper,workdir=/rw/work overlay /newroot \
  || fail "overlay mount over the host root failed"

# A fresh /tmp first, so that shares below /tmp stay visible.
mount -t tmpfs -o mode=1777 tmpfs /newroot/tmp || fail "mounting /tmp failed"
i=0
while read -r path; do
  mkdir -p "/newroot$path"
  mount -t 9p -o "$p9,cache=mmap" "rw$i" "/newroot$path" || fail "mounting share rw$i at $path failed"
  i=$((i + 1))
done < /ctl/rw_paths

mkdir -p /newroot/run/meshpool-vm
mount --move /ctl /newroot/run/meshpool-vm
mount --move /dev /newroot/dev
mount --move /sys /newroot/sys
mount --move /proc /newroot/proc
exec switch_root /newroot /bin/bash "$guest_script"
fail "switch_root to the overlay root failed"
