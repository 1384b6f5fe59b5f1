#!/usr/bin/env bash
# tools/build.sh DIR [cmake args...]: configures (once) and builds meshpool in
# DIR, incrementally.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
dir="$1"; shift
launcher=()
if command -v ccache >/dev/null 2>&1; then
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
fi
if [ ! -f "$dir/build.ninja" ]; then
  cmake -S "$root" -B "$dir" -G Ninja "${launcher[@]}" "$@"
fi
cmake --build "$dir" -j "$(nproc)"
