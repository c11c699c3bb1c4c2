"""Smoke run of bench/bench_torch_layer.py at tiny sizes (ctest bench_torch_layer_smoke): it
exits 0, its JSON has every figure for every (experts, strategy), and the plain layer's
outputs and gradients match MoELayer's on the same weights to 1e-5."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

TOLERANCE = 1e-5
COUNTS = {"aten_ops", "kernel_launches", "host_syncs"}
ROW = {"experts", "strategy", "moe_strategy", "plain_ms", "moe_ms", "ratio", "plain", "moe",
       "max_diff_out", "max_diff_grad"}
STRATEGIES = ["baseline", "fsmoe:chunks=4", "lina"]


def main(source: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "bench.json")
        run = subprocess.run([sys.executable, os.path.join(source, "bench", "bench_torch_layer.py"),
                              "--experts", "8", "--steps", "1", "--warmup", "0", "--tokens", "64",
                              "--strategies", ",".join(STRATEGIES), "--json", path],
                             capture_output=True, text=True, timeout=240)
        assert run.returncode == 0, f"exit {run.returncode}:\n{run.stdout}\n{run.stderr}"
        got = json.load(open(path))
    assert got["config"]["strategies"] == STRATEGIES, got["config"]
    rows = got["results"]
    assert [(r["experts"], r["strategy"]) for r in rows] == [(8, s) for s in STRATEGIES], rows
    for r in rows:
        assert set(r) == ROW, f"{r['strategy']}: keys {sorted(r)}"
        for layer in ("plain", "moe"):
            assert set(r[layer]) == COUNTS, f"{r['strategy']} {layer}: {r[layer]}"
            assert all(v > 0 for v in r[layer].values()), f"{r['strategy']} {layer}: {r[layer]}"
        assert r["plain_ms"] > 0 and r["moe_ms"] > 0, r
        for k in ("max_diff_out", "max_diff_grad"):
            assert r[k] <= TOLERANCE, f"{r['strategy']}: {k} = {r[k]:.3g} > {TOLERANCE}"
    print(run.stdout)


if __name__ == "__main__":
    main(sys.argv[1])
