"""What each of 4 gloo ranks returns from moecomm.torch.profile_cluster (run by
test_torch_profile_cluster.py through torch_spawn)."""
from __future__ import annotations

from typing import Any, Dict

import moecomm
import moecomm.torch as mt
from torch_spawn import guarded, run_on_ranks

SIZES = (1 << 12, 1 << 14, 1 << 16)


def _case(rank: int) -> Dict[str, Any]:
    out: Dict[str, Any] = {}
    out["one_host"] = guarded(lambda: mt.profile_cluster(sizes=SIZES, repeats=2, gemm=32))
    out["two_nodes"] = guarded(
        lambda: mt.profile_cluster(sizes=SIZES, repeats=2, gemm=32, ranks_per_node=2))
    # The fitted cluster is one moecomm takes: a collective simulated on it.
    if "error" not in out["two_nodes"]:
        out["simulated"] = guarded(lambda: {"ms": moecomm.simulate(
            cluster=out["two_nodes"], model="hybridep-fig14-tiny").iteration_ms})
    try:
        mt.profile_cluster(sizes=SIZES, repeats=1, gemm=32, ranks_per_node=3)
        out["bad"] = "no error"
    except ValueError as e:
        out["bad"] = str(e)
    return out


def run_all(outdir: str):
    return run_on_ranks(_case, outdir)
