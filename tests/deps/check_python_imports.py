#!/usr/bin/env python3
"""Every module outside the standard library that moecomm's Python code imports (the package,
its tests, examples, benchmarks, setup.py) is provided by a Debian package that
scripts/install-deps.sh installs, so a fresh machine set up by `make test` runs every test.

For each such import it checks that:
- python/tests/conftest.py's DEBIAN_PACKAGES names its package (the package a failing test
  asks the user to install);
- install-deps.sh installs that package (`install-deps.sh --list`);
- the module is importable by this interpreter and dpkg says it comes from that package (so a
  module installed by hand, by pip or from another package cannot stand in for it).
It also refuses pytest.importorskip and pytest.skip in the tests: a missing dependency fails.

Usage: check_python_imports.py SOURCE_DIR   (exit 0: all declared; 1: what is not, and where)
"""
from __future__ import annotations

import ast
import importlib.util
import subprocess
import sys
from pathlib import Path

SCANNED = ["python", "examples", "bench", "scripts", "tests", "setup.py"]
# Calls that import a module named by a string: importlib's, and the tests' own helper.
IMPORT_CALLS = {"import_module", "require", "importorskip"}
SKIP_CALLS = {"importorskip", "skip"}


def python_files(source: Path) -> list[Path]:
    files = []
    for name in SCANNED:
        p = source / name
        files += [p] if p.is_file() else sorted(p.rglob("*.py"))
    return [f for f in files if "build" not in f.relative_to(source).parts[:1]]


def local_modules(path: Path) -> set[str]:
    """Modules an absolute import in `path` finds in the tree: the package, its extension, and
    the modules beside the file (a script's or a test's own folder is on its sys.path)."""
    beside = {p.stem for p in path.parent.glob("*.py")}
    beside |= {p.parent.name for p in path.parent.glob("*/__init__.py")}
    return {"moecomm", "_moecomm"} | beside


def call_name(node: ast.Call) -> str:
    f = node.func
    return f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""


def imports_of(path: Path) -> tuple[list[tuple[str, int]], list[tuple[str, int]]]:
    """(top-level module, line) of each import, and (call, line) of each pytest skip."""
    tree = ast.parse(path.read_text(), str(path))
    found, skips = [], []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(a.name.split(".")[0], node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.module.split(".")[0], node.lineno))
        elif isinstance(node, ast.Call):
            name = call_name(node)
            arg = node.args[0] if node.args else None
            if name in IMPORT_CALLS and isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                found.append((arg.value.split(".")[0], node.lineno))
            is_pytest = isinstance(node.func, ast.Attribute) and \
                isinstance(node.func.value, ast.Name) and node.func.value.id == "pytest"
            if is_pytest and name in SKIP_CALLS:
                skips.append((f"pytest.{name}", node.lineno))
    return found, skips


def declared_packages(conftest: Path) -> dict[str, str]:
    """conftest.py's DEBIAN_PACKAGES (its last assignment), read without importing it."""
    tables = [ast.literal_eval(node.value) for node in ast.parse(conftest.read_text()).body
              if isinstance(node, ast.Assign) and any(
                  isinstance(t, ast.Name) and t.id == "DEBIAN_PACKAGES" for t in node.targets)]
    if not tables:
        raise SystemExit(f"{conftest}: no DEBIAN_PACKAGES table")
    return tables[-1]


def dpkg_owner(path: str) -> str:
    r = subprocess.run(["dpkg", "-S", path], capture_output=True, text=True)
    return r.stdout.split(":")[0] if r.returncode == 0 else ""


def main() -> int:
    source = Path(sys.argv[1]).resolve()
    files = python_files(source)
    table = declared_packages(source / "python" / "tests" / "conftest.py")
    installed = set(subprocess.run(["bash", str(source / "scripts" / "install-deps.sh"), "--list"],
                                   capture_output=True, text=True, check=True).stdout.split())
    users: dict[str, str] = {}
    problems = []
    for f in files:
        found, skips = imports_of(f)
        local = local_modules(f) | set(sys.stdlib_module_names)
        where = f.relative_to(source)
        for module, line in found:
            if module not in local:
                users.setdefault(module, f"{where}:{line}")
        if where.parts[:2] == ("python", "tests"):
            problems += [f"{where}:{line}: {call}: a test that needs a dependency fails, "
                         f"naming its package (conftest.require)" for call, line in skips]
    for module, where in sorted(users.items()):
        package = table.get(module)
        if package is None:
            problems.append(f"{where}: imports {module}, which conftest.py's DEBIAN_PACKAGES "
                            f"does not name: add its Debian package there and to "
                            f"scripts/install-deps.sh")
            continue
        if package not in installed:
            problems.append(f"{where}: imports {module} (Debian's {package}), which "
                            f"scripts/install-deps.sh does not install")
        spec = importlib.util.find_spec(module)
        if spec is None or not spec.origin:
            problems.append(f"{where}: imports {module}, which {sys.executable} cannot find: "
                            f"run scripts/install-deps.sh ({package})")
            continue
        owner = dpkg_owner(spec.origin)
        if owner != package:
            problems.append(f"{where}: imports {module} from {spec.origin}, which dpkg says "
                            f"comes from {owner or 'no Debian package'}, not {package}")
        print(f"{module:12} {package:22} {spec.origin}")
    for p in problems:
        print(f"error: {p}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
