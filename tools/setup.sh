#!/usr/bin/env bash
# Installs what building and testing meshpool needs, from Debian 12 packages.
# Idempotent: does nothing when everything is present.
set -euo pipefail

PACKAGES=(
  build-essential cmake ninja-build pkg-config git python3
  libabsl-dev libxxhash-dev libibverbs-dev ibverbs-providers
  libprotobuf-dev protobuf-compiler libgrpc++-dev protobuf-compiler-grpc
  libgtest-dev libgmock-dev libbenchmark-dev
  # The Soft-RoCE VM (tools/vm/): qemu, its initramfs, modules, verbs tools.
  qemu-system-x86 busybox-static kmod perftest rdma-core ibverbs-utils iproute2
)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" \
    || missing+=("$p")
done
# tools/vm/prepare.sh fetches the kernel package linux-image-amd64 depends
# on with `apt-get download`: that needs apt lists that know it.
lists_ok=true
apt-cache show linux-image-amd64 >/dev/null 2>&1 || lists_ok=false
if [ ${#missing[@]} -eq 0 ] && $lists_ok; then
  exit 0
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
if [ ${#missing[@]} -gt 0 ]; then
  echo "meshpool setup: installing ${missing[*]}" >&2
  $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
