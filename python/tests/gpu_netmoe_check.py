#!/usr/bin/env python3
"""SampleMovingMoE's part of gpu_smoke.py alone, with the host syncs it makes (by hand on a
machine with one CUDA GPU, after scripts/gpu-check.sh's build; CI never runs it, pytest does
not collect it).

torch_netmoe_cases.py's cases run forward, backward and GradSync.step() on 4 processes that
share the GPU, with gloo on CUDA tensors and with NCCL, each output and gradient against the
same case with gloo on CPU to 1e-5 (gpu_smoke.py's runs, comparison and collective audit),
and what SampleMovingMoE says at ep = 1 on one NCCL rank. On CUDA, torch's sync debug mode
("warn") reports each op that waits for the device; the check counts them per moecomm line
(all cases and ranks together).

    PYTHONPATH=<build>/python python3 python/tests/gpu_netmoe_check.py --json out.json
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import sys
import tempfile
import warnings
from pathlib import Path
from typing import Any, Dict

import torch

import gpu_smoke as smoke  # beside this file
import torch_netmoe_cases

WORLD = smoke.WORLD


def netmoe_cases(variant: str = "") -> list:
    return [("netmoe", "netmoe:" + c[0], c) for c in torch_netmoe_cases.CASES]


def worker(rank: int, world: int, backend: str, device_name: str, store: str, outdir: str,
           timing: bool, repeats: int, variant: str) -> None:
    """gpu_smoke's worker on SampleMovingMoE's cases, counting the host syncs on CUDA."""
    smoke.cases = netmoe_cases
    syncs: Dict[str, int] = {}
    if device_name != "cpu":
        import moecomm
        package = str(Path(moecomm.__file__).parent)

        def record(message, category, filename, lineno, file=None, line=None):
            if str(filename).startswith(package):
                key = f"{Path(filename).name}:{lineno}"
                syncs[key] = syncs.get(key, 0) + 1

        warnings.simplefilter("always")
        warnings.showwarning = record
        torch.cuda.set_sync_debug_mode("warn")
    try:
        smoke._worker(rank, world, backend, device_name, store, outdir, timing, repeats,
                      variant)
    finally:
        Path(outdir, f"syncs{rank}.json").write_text(json.dumps(syncs))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    ap.add_argument("--json", required=True, help="where the summary goes")
    args = ap.parse_args()
    smoke.cases = netmoe_cases
    smoke._worker = worker
    summary: Dict[str, Any] = {"device": args.device, "torch": torch.__version__, "runs": {}}
    tmp = tempfile.mkdtemp(prefix="gpu-netmoe-")
    ok = True
    if args.device == "cuda":
        summary["gpu"] = torch.cuda.get_device_name(0)
        summary["nccl_one_rank"] = smoke.one_rank(tmp)
        smoke.log(f"NCCL with one rank: {summary['nccl_one_rank']}")
    smoke.log("running the reference, gloo on CPU")
    ref = smoke.run_world("gloo", "cpu", WORLD, False, 1, tmp)
    runs = {"gloo-cpu-again": ("gloo", "cpu")} if args.device == "cpu" else {
        "gloo-cuda": ("gloo", "cuda"), "nccl-cuda": ("nccl", "cuda")}
    for name, (backend, dev) in runs.items():
        smoke.log(f"running {name}")
        before = set(glob.glob(os.path.join(tmp, f"{backend}-{dev}-*")))
        run = smoke.run_world(backend, dev, WORLD, False, 1, tmp)
        s = smoke.summarize(name, run, ref)
        syncs: Dict[str, int] = {}
        for outdir in set(glob.glob(os.path.join(tmp, f"{backend}-{dev}-*"))) - before:
            for f in glob.glob(os.path.join(outdir, "syncs*.json")):
                for k, n in json.loads(Path(f).read_text()).items():
                    syncs[k] = syncs.get(k, 0) + n
        s["syncs"] = dict(sorted(syncs.items()))
        summary["runs"][name] = s
        Path(args.json).write_text(json.dumps(summary, indent=1, default=str))
        ok &= smoke.report(name, s, WORLD)
        for k, n in s["syncs"].items():
            smoke.log(f"  host sync at {k}: {n}")
    smoke.log(f"\nnetmoe check: {'everything passed' if ok else 'FAILURES above'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
