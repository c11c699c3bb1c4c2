"""Ranks built with different settings, on 4 gloo processes: rank 0 (or ranks 0-1) builds a
layer or GradSync with one setting changed; every rank's constructor raises naming it. All
cases run in one spawn, one after another: the check completes on every rank even when the
ranks disagree, so the world stays usable (the last case trains a step on it)."""
from __future__ import annotations

import time
from typing import Any, Callable, Dict

import torch

from torch_spawn import run_on_ranks

TWO_NODES = {"name": "2x2", "levels": [
    {"name": "node", "count": 2, "bandwidth_GBps": 10, "latency_us": 10},
    {"name": "gpu", "count": 2, "bandwidth_GBps": 100, "latency_us": 2}],
    "device": {"tflops": 1, "memory_GB": 16, "memory_bandwidth_GBps": 50}}


def _layer(**changed: Any) -> Any:
    import moecomm.torch as mt
    args = {"hidden": 16, "ffn_hidden": 32, "experts": 8, "parallel": "ep=2"}
    args.update(changed)
    return mt.MoELayer(**args)


def _netmoe(**changed: Any) -> Any:
    import moecomm.torch as mt
    args = {"hidden": 16, "ffn_hidden": 32, "experts": 8, "parallel": "ep=2"}
    args.update(changed)
    return mt.SampleMovingMoE(**args)


def _sync(layer_args: Dict[str, Any] = {}, freeze: bool = False, **changed: Any) -> Any:
    import moecomm.torch as mt
    layer = _layer(**layer_args)
    if freeze:
        layer.w1.requires_grad_(False)
    return mt.GradSync([layer], **changed)


# name -> (what the differing ranks build, what the others build, the differing ranks).
CASES: Dict[str, Any] = {
    "strategy": (lambda: _layer(strategy="fsmoe"), lambda: _layer(), 1),
    "chunks": (lambda: _layer(strategy="base=baseline,chunks=2"), lambda: _layer(), 1),
    "ep": (lambda: _layer(parallel="ep=4"), lambda: _layer(), 1),
    "a2a": (lambda: _layer(strategy="base=baseline,a2a=2dh", parallel="ep=4",
                           cluster=TWO_NODES),
            lambda: _layer(parallel="ep=4", cluster=TWO_NODES), 1),
    "tp": (lambda: _layer(parallel="ep=2,tp=2"), lambda: _layer(), 1),
    "experts": (lambda: _layer(experts=16), lambda: _layer(), 1),
    "hidden": (lambda: _layer(hidden=16), lambda: _layer(hidden=32), 1),
    "hidden-two": (lambda: _layer(hidden=16), lambda: _layer(hidden=32), 2),
    "ffn_hidden": (lambda: _layer(ffn_hidden=64), lambda: _layer(), 1),
    "ffn_type": (lambda: _layer(ffn_type="swiglu"), lambda: _layer(), 1),
    "top_k": (lambda: _layer(top_k=1), lambda: _layer(), 1),
    "capacity_factor": (lambda: _layer(capacity_factor=1.25), lambda: _layer(), 1),
    "gate": (lambda: _layer(gate="sigmoid"), lambda: _layer(), 1),
    "temperature": (lambda: _layer(gate="xmoe", temperature=0.1),
                    lambda: _layer(gate="xmoe"), 1),
    "seed": (lambda: _layer(seed=1), lambda: _layer(), 1),
    "hybridep": (lambda: _layer(strategy="base=hybridep,hybrid_domain=2,compression=1",
                                parallel="ep=4"), lambda: _layer(parallel="ep=4"), 1),
    "hybrid_domain": (lambda: _layer(strategy="base=hybridep,hybrid_domain=2,compression=1",
                                     parallel="ep=4"),
                      lambda: _layer(strategy="base=hybridep,hybrid_domain=4,compression=1",
                                     parallel="ep=4"), 1),
    "cluster": (lambda: _layer(cluster=TWO_NODES), lambda: _layer(), 1),
    "timeout": (lambda: _layer(timeout=5), lambda: _layer(), 1),
    "unbuildable": (lambda: _layer(parallel="ep=3"), lambda: _layer(), 1),
    "netmoe": (lambda: _netmoe(hidden=32), lambda: _netmoe(), 1),
    "netmoe-solver": (lambda: _netmoe(solver="greedy"), lambda: _netmoe(), 1),
    "average": (lambda: _sync(average=True), lambda: _sync(), 1),
    "overlap": (lambda: _sync(overlap=False), lambda: _sync(), 1),
    "micro_batches": (lambda: _sync(micro_batches=4), lambda: _sync(), 1),
    "frozen": (lambda: _sync(freeze=True), lambda: _sync(), 1),
}


def _error(fn: Callable[[], Any]) -> Dict[str, Any]:
    import moecomm
    start = time.monotonic()
    try:
        fn()
        error = None
    except moecomm.Error as e:
        error = str(e)
    return {"error": error, "seconds": time.monotonic() - start}


def run_rank(rank: int) -> Dict[str, Any]:
    import moecomm.torch as mt
    out: Dict[str, Any] = {}
    for name, (differing, others, count) in CASES.items():
        out[name] = _error(differing if rank < count else others)
    # Consistent builds raise nothing, and the world still trains a step.
    out["consistent"] = _error(lambda: _netmoe())
    layer = None

    def train() -> None:
        nonlocal layer
        layer = _layer()
        sync = mt.GradSync([layer], average=True)
        gen = torch.Generator().manual_seed(rank)
        layer(torch.randn(8, 16, generator=gen)).square().sum().backward()
        sync.step()
    out["train"] = _error(train)
    # GradSync averaged the gate's gradient over the 4 data-parallel replicas: the same on
    # every rank.
    out["gate_grad"] = layer.gate_weight.grad.reshape(-1).tolist() if layer is not None else None
    return out


def run_all(outdir: str):
    return run_on_ranks(run_rank, outdir)
