import os
import subprocess
import sys

from conftest import SOURCE_DIR


def test_example_script_runs():
    script = SOURCE_DIR / "examples" / "python_quickstart.py"
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                       env=dict(os.environ), timeout=120)
    assert r.returncode == 0, r.stderr
    assert "recommended" in r.stdout
    assert "placement" in r.stdout
