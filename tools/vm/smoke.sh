#!/usr/bin/env bash
# tools/vm/smoke.sh: boots the VM and checks that rxe0's port is ACTIVE.
# Exit 0 when it is; otherwise run.sh's status, or 1.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
rc=0
out="$("$here/run.sh" --timeout 120 -- ibv_devinfo -d rxe0)" || rc=$?
printf '%s\n' "$out"
if [ "$rc" -ne 0 ]; then
  echo "vm smoke: ibv_devinfo -d rxe0 in the VM failed with exit status $rc" >&2
  exit "$rc"
fi
if ! grep -q PORT_ACTIVE <<<"$out"; then
  echo "vm smoke: rxe0 has no port in state PORT_ACTIVE" >&2
  exit 1
fi
echo "vm smoke: rxe0 is PORT_ACTIVE"
