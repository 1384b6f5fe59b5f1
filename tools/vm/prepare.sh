#!/usr/bin/env bash
# tools/vm/prepare.sh: readies the Soft-RoCE VM (see README.md) in a cache
# folder, $MESHPOOL_VM_DIR (default <repo>/build-vm):
#   kernel-<kver>/       Debian's kernel package, extracted (not installed),
#                        with modules.dep made by depmod
#   initramfs-<kver>.cpio  busybox + the virtio/9p/overlay modules + init
#   current.env          KVER, KERNEL, INITRD, MODULES for run.sh
# Idempotent; when everything is there it only asks apt-cache which kernel
# linux-image-amd64 depends on (and keeps the cached one if apt can't say).
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
vm_dir="${MESHPOOL_VM_DIR:-$repo/build-vm}"

# Loaded in the initramfs, in this order (dependencies resolved by modprobe).
readonly INITRAMFS_MODULES=(virtio_pci virtio_console 9pnet_virtio 9p overlay)

die() { echo "vm prepare: $*" >&2; exit 1; }

for tool in apt-cache apt-get dpkg-deb depmod modprobe flock; do
  command -v "$tool" >/dev/null || die "$tool not found: run tools/setup.sh first"
done
[ -x /bin/busybox ] && /bin/busybox --list | grep -x cpio >/dev/null \
  || die "/bin/busybox (static, with cpio) not found: run tools/setup.sh first"

mkdir -p "$vm_dir"
exec 9>"$vm_dir/.lock"
flock 9  # one prepare at a time; run.sh callers may race

# The kernel package linux-image-amd64 currently depends on, e.g.
# linux-image-6.1.0-57-amd64.
kernel_package() {
  apt-cache depends linux-image-amd64 2>/dev/null \
    | sed -n 's/^ *Depends: \(linux-image-[0-9].*-amd64\)$/\1/p' | head -n 1
}

pkg="$(kernel_package || true)"
if [ -z "$pkg" ]; then
  if [ -f "$vm_dir/current.env" ]; then
    exit 0  # apt knows nothing (no lists), but a kernel is already cached
  fi
  die "apt-cache does not know linux-image-amd64 (no apt lists?): run tools/setup.sh first"
fi
kver="${pkg#linux-image-}"
kdir="$vm_dir/kernel-$kver"
initrd="$vm_dir/initramfs-$kver.cpio"

if [ ! -f "$kdir/.complete" ]; then
  echo "vm prepare: fetching and extracting $pkg into $kdir" >&2
  rm -rf "$kdir" "$vm_dir/download"
  mkdir -p "$vm_dir/download"
  apt_opts=(-q)  # as root, apt warns when it can't drop to user _apt here
  if [ "$(id -u)" -eq 0 ]; then apt_opts+=(-o APT::Sandbox::User=root); fi
  (cd "$vm_dir/download" && apt-get download "${apt_opts[@]}" "$pkg" >&2) \
    || die "apt-get download $pkg failed: run tools/setup.sh first (apt-get update if the apt lists are stale)"
  dpkg-deb -x "$vm_dir"/download/"$pkg"_*.deb "$kdir" \
    || die "dpkg-deb -x of $pkg failed (disk full?)"
  rm -rf "$vm_dir/download"
  [ -f "$kdir/boot/vmlinuz-$kver" ] || die "$pkg has no boot/vmlinuz-$kver"
  # The package ships no modules.dep: modprobe in the guest needs one.
  depmod -b "$kdir" "$kver" || die "depmod -b $kdir $kver failed"
  touch "$kdir/.complete"
fi

if [ ! -f "$initrd" ] || [ "$here/initramfs-init.sh" -nt "$initrd" ] \
    || [ /bin/busybox -nt "$initrd" ]; then
  echo "vm prepare: building $initrd" >&2
  stage="$vm_dir/initramfs.tmp"
  rm -rf "$stage"
  mkdir -p "$stage"/{bin,modules,proc,sys,dev,ctl,host,rw,newroot}
  cp /bin/busybox "$stage/bin/busybox"
  cp "$here/initramfs-init.sh" "$stage/init"
  chmod 755 "$stage/init"
  # "insmod /path/x.ko " lines, dependencies first; keep each module once.
  for m in "${INITRAMFS_MODULES[@]}"; do
    modprobe -d "$kdir" -S "$kver" --show-depends "$m" || die "modprobe --show-depends $m failed"
  done | awk '$1 == "insmod" && !seen[$2]++ { print $2 }' > "$stage/modules.list"
  while read -r ko; do
    cp "$ko" "$stage/modules/"
    basename "$ko" >> "$stage/modules/order"
  done < "$stage/modules.list"
  rm "$stage/modules.list"
  (cd "$stage" && find . | /bin/busybox cpio -o -H newc 2>/dev/null) > "$initrd.tmp"
  mv "$initrd.tmp" "$initrd"
  rm -rf "$stage"
fi

cat > "$vm_dir/current.env.tmp" <<EOF
KVER=$kver
KERNEL=$kdir/boot/vmlinuz-$kver
INITRD=$initrd
MODULES=$kdir/lib/modules/$kver
EOF
mv "$vm_dir/current.env.tmp" "$vm_dir/current.env"

# Drop kernels an older apt list pointed at.
for old in "$vm_dir"/kernel-* "$vm_dir"/initramfs-*.cpio; do
  case "$old" in
    "$kdir" | "$initrd") ;;
    *) [ -e "$old" ] && rm -rf "$old" ;;
  esac
done
exit 0
