#!/usr/bin/env bash
# The first README command: install, build, and run the demo workload on a
# local cluster (coordinator + 3 memory nodes as processes on 127.0.0.1).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
"$root/tools/setup.sh"
"$root/tools/build.sh" "$root/build" -DCMAKE_BUILD_TYPE=RelWithDebInfo
exec "$root/build/tools/meshpool" demo "$@"
