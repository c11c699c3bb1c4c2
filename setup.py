"""Builds the `moecomm` package: the pure-Python files of python/moecomm, the extension
`moecomm._moecomm` compiled by the project's CMake (target moecomm_python), and the shipped
presets of data/ as package data.

CMake builds in build-pip/cmake, kept between installs so a second install only relinks.
MOECOMM_CMAKE_BUILD_DIR names another build tree to reuse (e.g. `build`, after `make build`);
MOECOMM_BUILD_JOBS sets the parallel jobs (default 2).
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


class CMakeExtension(Extension):
    def __init__(self, name: str) -> None:
        super().__init__(name, sources=[])


class CMakeBuild(build_ext):
    """Configures and builds the extension with CMake, then copies it into the package."""

    def build_extension(self, ext: Extension) -> None:
        build_dir = Path(os.environ.get("MOECOMM_CMAKE_BUILD_DIR", ROOT / "build-pip" / "cmake"))
        build_dir = build_dir if build_dir.is_absolute() else ROOT / build_dir
        jobs = os.environ.get("MOECOMM_BUILD_JOBS", "2")
        subprocess.run(["cmake", "-S", str(ROOT), "-B", str(build_dir),
                        f"-DPython3_EXECUTABLE={sys.executable}", "-DMOECOMM_PYTHON=ON"],
                       check=True)
        subprocess.run(["cmake", "--build", str(build_dir), "--target", "moecomm_python",
                        "-j", jobs], check=True)
        built = build_dir / "python" / "moecomm" / Path(self.get_ext_filename(ext.name)).name
        target = Path(self.get_ext_fullpath(ext.name))
        target.parent.mkdir(parents=True, exist_ok=True)
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
    packages=["moecomm"],
    package_dir={"moecomm": "python/moecomm"},
    ext_modules=[CMakeExtension("moecomm._moecomm")],
    cmdclass={"build_ext": CMakeBuild, "build_py": BuildPyWithPresets},
    options={"build": {"build_base": "build-pip/setuptools"},
             "egg_info": {"egg_base": "build-pip"}},
    zip_safe=False,
)
