"""Builds the `moecomm` package: the pure-Python files of python/moecomm, the extension
`moecomm._moecomm` compiled by the project's CMake (target moecomm_python), and the shipped
presets of data/ as package data.

CMake builds in build-pip/cmake, kept between installs so a second install only relinks.
Environment:
  MOECOMM_CMAKE_BUILD_DIR  another build tree to reuse (e.g. `build`, after `make build`)
  MOECOMM_BUILD_JOBS       parallel build jobs (default 2)
  MOECOMM_PYTHON_ONLY      1: configure only the extension and the layers it links
                           (-DMOECOMM_PYTHON_ONLY=ON: no CLI, MPI, OpenBLAS, GTest or CLI11
                           needed); 0: the whole project; unset: as the build tree was
  MOECOMM_EXTENSION        an extension already built for this Python (build/python/moecomm/
                           _moecomm*.so): packaged as it is, CMake is not run (the ctest
                           python_pip_install checks the packaging this way, in seconds)
  MOECOMM_PIP_BUILD_DIR    where setuptools stages the package (default build-pip)
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
STAGING = Path(os.environ.get("MOECOMM_PIP_BUILD_DIR", ROOT / "build-pip"))


def cached_python(build_dir: Path) -> str:
    """The interpreter a configured build tree compiles for (resolved), or "" if none.

    A venv's python resolves to the interpreter it was made from: a tree configured for
    /usr/bin/python3 (`make build`) is reused as it is, not re-pointed at the venv."""
    cache = build_dir / "CMakeCache.txt"
    if not cache.exists():
        return ""
    for line in cache.read_text().splitlines():
        if line.startswith("Python3_EXECUTABLE:"):
            return os.path.realpath(line.split("=", 1)[1])
    return ""


class CMakeExtension(Extension):
    def __init__(self, name: str) -> None:
        super().__init__(name, sources=[])


class CMakeBuild(build_ext):
    """Configures and builds the extension with CMake, then copies it into the package."""

    def build_extension(self, ext: Extension) -> None:
        target = Path(self.get_ext_fullpath(ext.name))
        target.parent.mkdir(parents=True, exist_ok=True)
        prebuilt = os.environ.get("MOECOMM_EXTENSION")
        if prebuilt:
            shutil.copyfile(prebuilt, target)
            return
        build_dir = Path(os.environ.get("MOECOMM_CMAKE_BUILD_DIR", ROOT / "build-pip" / "cmake"))
        build_dir = build_dir if build_dir.is_absolute() else ROOT / build_dir
        jobs = os.environ.get("MOECOMM_BUILD_JOBS", "2")
        configure = ["cmake", "-S", str(ROOT), "-B", str(build_dir), "-DMOECOMM_PYTHON=ON"]
        python_only = os.environ.get("MOECOMM_PYTHON_ONLY")
        if python_only is not None:
            configure.append(f"-DMOECOMM_PYTHON_ONLY={'ON' if python_only == '1' else 'OFF'}")
        if cached_python(build_dir) != os.path.realpath(sys.executable):
            configure.append(f"-DPython3_EXECUTABLE={sys.executable}")
        subprocess.run(configure, check=True)
        subprocess.run(["cmake", "--build", str(build_dir), "--target", "moecomm_python",
                        "-j", jobs], check=True)
        built = build_dir / "python" / "moecomm" / Path(self.get_ext_filename(ext.name)).name
        shutil.copyfile(built, target)


class BuildPyWithPresets(build_py):
    """Copies data/clusters and data/models into the package, so an installed package finds
    its presets without the source tree (moecomm/__init__.py points MOECOMM_DATA_DIR there)."""

    def run(self) -> None:
        super().run()
        for kind in ("clusters", "models"):
            dest = Path(self.build_lib) / "moecomm" / "data" / kind
            dest.mkdir(parents=True, exist_ok=True)
            for f in sorted((ROOT / "data" / kind).glob("*.json")):
                shutil.copyfile(f, dest / f.name)


setup(
    packages=["moecomm", "moecomm.torch"],
    package_dir={"moecomm": "python/moecomm"},
    package_data={"moecomm": ["py.typed", "*.pyi"]},
    ext_modules=[CMakeExtension("moecomm._moecomm")],
    cmdclass={"build_ext": CMakeBuild, "build_py": BuildPyWithPresets},
    options={"build": {"build_base": str(STAGING / "setuptools")},
             "egg_info": {"egg_base": str(STAGING)}},
    zip_safe=False,
)
