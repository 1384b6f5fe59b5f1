#!/usr/bin/env bash
# Installs what building and testing meshpool needs, from Debian 12 packages.
# Idempotent: does nothing when everything is present.
set -euo pipefail

PACKAGES=(
  build-essential cmake ninja-build pkg-config git python3
  libabsl-dev libxxhash-dev libibverbs-dev ibverbs-providers
  libprotobuf-dev protobuf-compiler libgrpc++-dev protobuf-compiler-grpc
  libgtest-dev libgmock-dev libbenchmark-dev
  # Metrics over HTTP (metrics/): the embedded HTTP server.
  libmicrohttpd-dev
  # Coordinators sharing their state in etcd (tests start their own members).
  etcd-server
  # `meshpool certs` makes a cluster's TLS certificates with openssl.
  openssl
  # The Python package (python/): Debian's python3 and its packages.
  python3-dev python3-pybind11 pybind11-dev python3-pytest python3-numpy
  python3-torch python3-venv python3-pip python3-setuptools python3-wheel
  # Fuzzing (tests/fuzz, tools/fuzz.sh): clang's libFuzzer; the sanitized
  # build is a clang build.
  clang-14 libclang-rt-14-dev
  # bench/kv_compare.sh (CI runs it in its smoke mode): the real servers
  # meshpool is compared with, and the loopback TCP ceiling.
  redis-server memcached iperf3
  # bench/kv_compare reaches them with the client libraries their users use.
  libhiredis-dev libmemcached-dev
  # bench/kv_instructions.sh (smoke in CI): instructions per operation
  # counted with callgrind (and its client-request header).
  valgrind
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
