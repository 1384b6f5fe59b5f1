"""Builds the _meshpool extension with the project's own CMake build.

MESHPOOL_BUILD_DIR: an already configured build tree to reuse (only the
extension target is built there); default: a fresh tree under
python/build/cmake. MESHPOOL_BUILD_JOBS: parallel compile jobs (default:
the number of CPUs). MESHPOOL_SOURCE_DIR: the meshpool checkout, when this
directory is a copy of python/ outside it (default: the parent directory).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = Path(__file__).resolve().parent
ROOT = Path(os.environ.get("MESHPOOL_SOURCE_DIR", HERE.parent)).resolve()


class CMakeBuild(build_ext):
    def build_extension(self, ext: Extension) -> None:
        if not (ROOT / "CMakeLists.txt").exists():
            raise RuntimeError(
                f"{ROOT} is not the meshpool source tree: install from a "
                "checkout (pip install --no-build-isolation ./python)")
        given = os.environ.get("MESHPOOL_BUILD_DIR")
        build = Path(given) if given else HERE / "build" / "cmake"
        if not (build / "CMakeCache.txt").exists():
            if given:
                raise RuntimeError(f"MESHPOOL_BUILD_DIR={given} is not a configured build")
            generator = ["-G", "Ninja"] if shutil.which("ninja") else []
            subprocess.check_call([
                "cmake", "-S", str(ROOT), "-B", str(build), *generator,
                "-DCMAKE_BUILD_TYPE=Release", "-DMESHPOOL_BUILD_TESTS=OFF",
                "-DMESHPOOL_BUILD_BENCH=OFF", f"-DPython_EXECUTABLE={sys.executable}",
            ])
        jobs = os.environ.get("MESHPOOL_BUILD_JOBS", str(os.cpu_count() or 2))
        subprocess.check_call(["cmake", "--build", str(build), "--target", "_meshpool",
                               "-j", jobs])
        built = sorted((build / "python" / "meshpool").glob("_meshpool*.so"))
        if not built:
            raise RuntimeError(f"the build left no _meshpool*.so in {build}/python/meshpool "
                               "(is python3-pybind11 installed? run tools/setup.sh)")
        target = Path(self.get_ext_fullpath(ext.name))
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(built[-1], target)


setup(
    packages=["meshpool", "meshpool.integrations"],
    package_data={"meshpool": ["py.typed", "*.pyi"]},
    ext_modules=[Extension("meshpool._meshpool", sources=[])],
    cmdclass={"build_ext": CMakeBuild},
    zip_safe=False,
)
