"""examples/train_torch.py trains (the loss falls) on 4 spawned gloo processes and prints
the last step's ops beside the simulation on the profiled world."""
from __future__ import annotations

import os
import subprocess
import sys

from conftest import SOURCE_DIR, require

require("torch")


def test_train_torch_example_loss_falls():
    script = SOURCE_DIR / "examples" / "train_torch.py"
    r = subprocess.run([sys.executable, str(script), "--steps", "30"], capture_output=True,
                       text=True, env=dict(os.environ), timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    lines = r.stdout.splitlines()
    steps = [line.split() for line in lines if line.split() and line.split()[0].isdigit()]
    assert len(steps) == 30
    losses = [float(s[1]) for s in steps]
    assert losses[-1] < 0.5 * losses[0], losses
    table = lines[lines.index(next(l for l in lines if l.startswith("op "))):]
    names = {row.split()[0] for row in table[1:]}
    assert {"gate", "moe.dispatch.a2a", "moe.expert", "moe.combine.a2a"} <= names
    assert "grad.dense.allreduce" in names
    for row in table[1:]:
        measured, simulated = map(float, row.split()[-2:])
        assert measured >= 0 and simulated >= 0
