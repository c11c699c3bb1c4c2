"""Shared fixtures: a NetMoE placement instance with locality, the CLI binary to compare
error messages with, the Debian package behind each module the suite imports, and the rule
that a skipped test fails the suite (scripts/install-deps.sh installs everything it needs)."""
from __future__ import annotations

import importlib
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

SOURCE_DIR = Path(os.environ.get("MOECOMM_SOURCE_DIR", Path(__file__).resolve().parents[2]))
BUILD_DIR = SOURCE_DIR / "build"

# The Debian package of every module outside the standard library that the package, its
# tests, examples and benchmarks import. tests/deps/check_python_imports.py checks that this
# table covers every such import, that dpkg agrees, and that install-deps.sh installs each.
DEBIAN_PACKAGES = {
    "numpy": "python3-numpy",
    "pytest": "python3-pytest",
    "setuptools": "python3-setuptools",
    "torch": "python3-torch",
}

# `pytest python/tests` from the checkout after `make build` sees what ctest's environment
# gives (python/CMakeLists.txt): the build tree's package and binary, for this process and
# the processes the tests spawn.
if "PYTHONPATH" not in os.environ and (BUILD_DIR / "python" / "moecomm").is_dir():
    os.environ["PYTHONPATH"] = str(BUILD_DIR / "python")
    sys.path.insert(0, os.environ["PYTHONPATH"])
os.environ.setdefault("MOECOMM_SOURCE_DIR", str(SOURCE_DIR))
os.environ.setdefault("MOECOMM_BINARY", str(BUILD_DIR / "moecomm"))


def require(module: str) -> ModuleType:
    """The module, or a failure (never a skip) naming the Debian package that provides it."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        package = DEBIAN_PACKAGES.get(module.split(".")[0], "?")
        pytest.fail(f"{module} is not importable ({e}): install Debian's {package}, as "
                    f"scripts/install-deps.sh does (make test runs it)", pytrace=False)


def moecomm_binary() -> str:
    """The `moecomm` command the tests compare with: a failure, not a skip, when it is absent."""
    binary = os.environ["MOECOMM_BINARY"]
    if not os.path.exists(binary):
        pytest.fail(f"the moecomm binary {binary} is not built: run `make build` (or set "
                    f"MOECOMM_BINARY)", pytrace=False)
    return binary


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A skipped test fails: everything the suite needs is installed by install-deps.sh, so a
    skip can only hide a test that never ran (README "Python": no test is skipped)."""
    outcome = yield
    report = outcome.get_result()
    if report.skipped and not hasattr(report, "wasxfail"):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else report.longrepr
        report.outcome = "failed"
        report.longrepr = f"skipped tests fail this suite: {reason}"


def locality_counts(samples: int, experts: int, devices: int, tokens: int = 2048,
                    seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Counts with NetMoE's data locality (Sec. 1): each sample sends about half its tokens
    to the experts of one device; experts sit in equal contiguous blocks."""
    rng = np.random.default_rng(seed)
    per_device = experts // devices
    expert_device = np.repeat(np.arange(devices), per_device).astype(np.int64)
    num = np.zeros((samples, experts), dtype=np.int64)
    for i in range(samples):
        home = rng.integers(devices)
        local = int(rng.uniform(0.3, 0.7) * tokens)
        num[i] += np.bincount(rng.integers(home * per_device, (home + 1) * per_device, local),
                              minlength=experts)
        num[i] += np.bincount(rng.integers(0, experts, tokens - local), minlength=experts)
    return num, expert_device


@pytest.fixture
def netmoe_instance() -> tuple[np.ndarray, np.ndarray, int]:
    """I = 128 samples, E = 64 experts on 4 nodes x 8 devices (NetMoE Table 3's shape)."""
    num, expert_device = locality_counts(128, 64, 32)
    return num, expert_device, 8


def cli_error(*args: str) -> str:
    """The message after "error: " that the moecomm binary prints."""
    r = subprocess.run([moecomm_binary(), *args], capture_output=True, text=True)
    assert r.returncode == 2, r.stderr
    line = [x for x in r.stderr.splitlines() if x.startswith("error: ")][0]
    return line[len("error: "):]
