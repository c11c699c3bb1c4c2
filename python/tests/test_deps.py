"""tests/deps/check_python_imports.py passes on the tree, and fails, naming the import, on a
copy with each kind of undeclared dependency: a module no table names, a package
install-deps.sh does not install, a module from no Debian package, a module not installed,
and a skip in the tests."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from conftest import SOURCE_DIR

CHECKER = SOURCE_DIR / "tests" / "deps" / "check_python_imports.py"


def run_checker(source: Path, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(CHECKER), str(source)], capture_output=True,
                          text=True, env={**os.environ, **env})


def tree(tmp_path: Path, files: dict[str, str], table: dict[str, str] | None = None,
         extra_packages: str = "", drop_package: str = "") -> Path:
    """A copy of the checked parts of the project: conftest's table (optionally replaced),
    install-deps.sh (optionally with a package added or removed), and the given files."""
    root = tmp_path / "src"
    (root / "python" / "tests").mkdir(parents=True)
    (root / "scripts").mkdir()
    conftest = (SOURCE_DIR / "python" / "tests" / "conftest.py").read_text()
    if table is not None:
        conftest += f"\nDEBIAN_PACKAGES = {table!r}\n"
    (root / "python" / "tests" / "conftest.py").write_text(conftest)
    script = (SOURCE_DIR / "scripts" / "install-deps.sh").read_text()
    if drop_package:
        assert f" {drop_package}" in script
        script = script.replace(f" {drop_package}", " ")
    script = script.replace("PACKAGES=(", f"PACKAGES=({extra_packages} ", 1)
    (root / "scripts" / "install-deps.sh").write_text(script)
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def run_suite(tmp_path: Path, test: str, **env: str) -> subprocess.CompletedProcess:
    """pytest on a copy of the suite's conftest and helpers with one test module."""
    tests = tmp_path / "tests"
    shutil.copytree(SOURCE_DIR / "python" / "tests", tests,
                    ignore=shutil.ignore_patterns("test_*.py", "__pycache__"))
    (tests / "test_one.py").write_text(test)
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           str(tests)], capture_output=True, text=True,
                          env={**os.environ, **env})


def test_the_project_declares_every_import():
    r = run_checker(SOURCE_DIR)
    assert r.returncode == 0, r.stderr
    assert "torch        python3-torch" in r.stdout


def test_an_import_no_table_names(tmp_path):
    root = tree(tmp_path, {"examples/x.py": "import numpy\n\n\ndef f():\n    import yaml\n"})
    r = run_checker(root)
    assert r.returncode == 1
    assert "error: examples/x.py:5: imports yaml, which conftest.py's DEBIAN_PACKAGES does " \
           "not name" in r.stderr
    assert "numpy" not in r.stderr


def test_a_package_install_deps_does_not_install(tmp_path):
    root = tree(tmp_path, {"bench/b.py": "import torch\n"}, drop_package="python3-torch")
    r = run_checker(root)
    assert r.returncode == 1
    assert "bench/b.py:1: imports torch (Debian's python3-torch), which " \
           "scripts/install-deps.sh does not install" in r.stderr


def test_a_module_from_no_debian_package(tmp_path):
    site = tmp_path / "site" / "handmade"
    site.mkdir(parents=True)
    (site / "__init__.py").write_text("")
    root = tree(tmp_path, {"examples/x.py": "import handmade\n"},
                table={"handmade": "python3-handmade"}, extra_packages="python3-handmade")
    r = run_checker(root, PYTHONPATH=str(site.parent))
    assert r.returncode == 1
    assert f"imports handmade from {site / '__init__.py'}, which dpkg says comes from no " \
           f"Debian package, not python3-handmade" in r.stderr


def test_a_module_not_installed(tmp_path):
    root = tree(tmp_path, {"python/tests/test_x.py": "from conftest import require\n"
                                                      "require('nosuchmodule')\n"},
                table={"nosuchmodule": "python3-nosuch"}, extra_packages="python3-nosuch")
    r = run_checker(root)
    assert r.returncode == 1
    assert "python/tests/test_x.py:2: imports nosuchmodule, which" in r.stderr
    assert "cannot find: run scripts/install-deps.sh (python3-nosuch)" in r.stderr


def test_a_skip_in_the_tests(tmp_path):
    root = tree(tmp_path, {"python/tests/test_x.py": "import pytest\n"
                                                      "torch = pytest.importorskip('torch')\n"})
    r = run_checker(root)
    assert r.returncode == 1
    assert "python/tests/test_x.py:2: pytest.importorskip: a test that needs a dependency " \
           "fails, naming its package" in r.stderr


def test_a_missing_package_fails_the_test_naming_it(tmp_path):
    """conftest.require fails (never skips) with the package and install-deps.sh."""
    blocker = tmp_path / "blocker"
    blocker.mkdir()
    (blocker / "torch.py").write_text("raise ImportError('torch removed for this test')\n")
    r = run_suite(tmp_path, "from conftest import require\nrequire('torch')\n\n\n"
                  "def test_x():\n    pass\n",
                  PYTHONPATH=f"{blocker}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    assert r.returncode != 0
    assert "torch is not importable (torch removed for this test): install Debian's " \
           "python3-torch, as scripts/install-deps.sh does" in r.stdout
    assert "skipped" not in r.stdout


def test_a_skip_fails(tmp_path):
    r = run_suite(tmp_path, "import pytest\n\n\ndef test_x():\n    pytest.skip('no reason')\n")
    assert r.returncode == 1, r.stdout
    assert "1 failed" in r.stdout and "skipped tests fail this suite: Skipped: no reason" \
        in r.stdout
