#!/usr/bin/env bash
# python/tests/pip_install.sh SOURCE_DIR BUILD_DIR
#
# `pip install --no-build-isolation ./python` as a user runs it, into a fresh
# virtual environment of Debian's /usr/bin/python3 (with its system
# packages), from a copy of python/ (the checkout stays clean; work files go
# under BUILD_DIR): setup.py configures and builds the extension in a fresh
# CMake tree of its own (about 2 minutes on 2 cores). Then imports the
# installed package from elsewhere and checks it is the installed one,
# typed, and working.
set -euo pipefail
src="$1"
build="$2"
work="$build/python-pip-test"
rm -rf "$work"
mkdir -p "$work"
cp -r "$src/python" "$work/python"
rm -rf "$work/python/build" "$work/python/"*.egg-info
/usr/bin/python3 -m venv --system-site-packages "$work/venv"
MESHPOOL_SOURCE_DIR="$src" MESHPOOL_BUILD_JOBS=2 \
  "$work/venv/bin/pip" install --no-build-isolation --no-index -q "$work/python"
cd "$work"
"$work/venv/bin/python" - <<'PY'
import pathlib, sys
import meshpool
import meshpool.integrations.lmcache, meshpool.integrations.sglang
from meshpool import _meshpool
where = pathlib.Path(meshpool.__file__).resolve()
assert "site-packages" in where.parts, where
assert (where.parent / "py.typed").exists() and (where.parent / "_meshpool.pyi").exists()
assert issubclass(meshpool.NotFound, KeyError) and issubclass(meshpool.InvalidArgument, ValueError)
try:
    meshpool.Client("127.0.0.1:1", connect_timeout=0.2)
except meshpool.Unavailable as e:
    print("installed at", where.parent, "- unreachable coordinator:", e)
else:
    sys.exit("connecting to 127.0.0.1:1 should have failed Unavailable")
PY
