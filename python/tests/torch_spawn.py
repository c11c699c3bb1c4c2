"""Runs a test function on 4 spawned gloo processes (torch.multiprocessing.spawn) and
collects what each rank returns (a JSON-able dict)."""
from __future__ import annotations

import datetime
import json
import os
import traceback
from typing import Any, Callable, Dict, List

import torch
import torch.distributed as dist

WORLD = 4


def run_on_ranks(fn: Callable[..., Dict[str, Any]], outdir: str, *args: Any) -> List[Dict[str, Any]]:
    """``fn(rank, *args)`` on every rank (a module-level function); its results by rank."""
    import torch.multiprocessing as mp
    mp.spawn(_worker, args=(os.path.join(outdir, "store"), outdir, fn, args), nprocs=WORLD)
    return [json.load(open(os.path.join(outdir, f"rank{r}.json"))) for r in range(WORLD)]


def guarded(fn: Callable[..., Dict[str, Any]], *args: Any) -> Dict[str, Any]:
    """``fn(*args)``, or {"error": the traceback}: one case failing leaves the others running."""
    try:
        return fn(*args)
    except Exception:  # reported per case
        return {"error": traceback.format_exc()}


def _worker(rank: int, store: str, outdir: str, fn: Callable, args: tuple) -> None:
    torch.set_num_threads(1)
    # A collective that waits for a peer (a size mismatch in a broken build) fails in a
    # minute instead of gloo's half hour.
    dist.init_process_group("gloo", init_method="file://" + store, rank=rank, world_size=WORLD,
                            timeout=datetime.timedelta(seconds=60))
    result = fn(rank, *args)
    with open(os.path.join(outdir, f"rank{rank}.json"), "w") as f:
        json.dump(result, f)
    dist.destroy_process_group()


TOLERANCE = 1e-5  # relative to the reference's magnitude, fp32


def assert_matches_reference(got: Dict[str, Any], rank: int, case: str) -> None:
    """One rank's result of a case: no error, and every difference from the reference (its
    "diffs", each relative to the reference's magnitude) within TOLERANCE."""
    assert "error" not in got, f"rank {rank}: {got.get('error')}"
    for what, diff in got["diffs"].items():
        assert diff <= TOLERANCE, f"rank {rank} {case}: {what} differs by {diff:.3g}"
