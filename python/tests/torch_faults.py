"""moecomm.torch under faults, on 4 gloo processes: the timeout every process group it creates
gets, the errors of a bad timeout, of a second GradSync.step() without a backward, and what
GradSync does with a frozen parameter."""
from __future__ import annotations

import datetime
import math
from typing import Any, Dict, List

import torch

from torch_spawn import run_on_ranks

# The default group's timeout, as torch_spawn's init_process_group sets it.
INIT_TIMEOUT_S = 60.0

BAD_TIMEOUTS = {
    "zero": 0,
    "negative": -1.5,
    "nan": float("nan"),
    "inf": math.inf,
    "zero-timedelta": datetime.timedelta(0),
    "str": "5",
    "bool": True,
}


def _group_timeouts(layer: Any, rank: int) -> List[List[Any]]:
    """[ranks, the group's timeout in seconds (None: the default group)] per group holding
    ``rank`` (new_group gives the others a placeholder)."""
    from moecomm.torch.groups import group_timeout
    out = []
    for ranks, g in sorted(layer.groups.registry._groups.items()):
        if rank in ranks:
            t = None if g is None else group_timeout(g)
            out.append([list(ranks), None if t is None else t.total_seconds()])
    return out


def _loss(layer: Any, rank: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(100 + rank)
    x = torch.randn(8, 16, generator=gen)
    r = torch.randn(8, 16, generator=gen)
    return (layer(x) * r).sum()


def _error(fn) -> Any:
    import moecomm
    try:
        fn()
        return None
    except moecomm.Error as e:
        return str(e)


def run_rank(rank: int) -> Dict[str, Any]:
    import moecomm.torch as mt
    from moecomm.torch.groups import group_timeout
    out: Dict[str, Any] = {"default": group_timeout().total_seconds()}
    # Timeouts reach the groups.
    out["seconds"] = _group_timeouts(mt.MoELayer(16, 32, 8, parallel="ep=2", timeout=5), rank)
    out["timedelta"] = _group_timeouts(mt.MoELayer(
        16, 32, 8, parallel="ep=2", timeout=datetime.timedelta(seconds=7.5)), rank)
    out["unset"] = _group_timeouts(mt.MoELayer(16, 32, 8, parallel="ep=2"), rank)
    out["netmoe"] = _group_timeouts(mt.SampleMovingMoE(16, 32, 8, parallel="ep=2", timeout=3),
                                    rank)
    # Bad timeouts.
    for name, value in BAD_TIMEOUTS.items():
        out[f"bad-{name}"] = _error(lambda: mt.MoELayer(16, 32, 8, parallel="ep=2",
                                                        timeout=value))
    out["bad-netmoe"] = _error(lambda: mt.SampleMovingMoE(16, 32, 8, parallel="ep=2",
                                                          timeout=-1))
    # A second step() without a backward, with and without overlap; a step() with no backward.
    for overlap in (True, False):
        layer = mt.MoELayer(16, 32, 8, parallel="ep=2")
        sync = mt.GradSync([layer], overlap=overlap)
        out[f"fresh-step-{overlap}"] = _error(sync.step)
        _loss(layer, rank).backward()
        sync.step()
        after = [p.grad.clone() for p in layer.parameters()]
        out[f"double-step-{overlap}"] = _error(sync.step)
        out[f"unchanged-{overlap}"] = all(bool((p.grad == a).all())
                                          for p, a in zip(layer.parameters(), after))
        _loss(layer, rank).backward()  # the next step runs again
        out[f"next-step-{overlap}"] = _error(sync.step)
    # Built after the backward: its first step takes the gradients there, a second raises.
    layer = mt.MoELayer(16, 32, 8, parallel="ep=2")
    _loss(layer, rank).backward()
    sync = mt.GradSync([layer])
    out["late-first"] = _error(sync.step)
    out["late-second"] = _error(sync.step)
    # A frozen gate: skipped, and the experts' gradients are those of the unfrozen layer.
    results = {}
    for frozen in (False, True):
        layer = mt.MoELayer(16, 32, 8, parallel="ep=2", seed=3)
        layer.gate_weight.requires_grad_(not frozen)
        extra = torch.nn.Parameter(torch.ones(3), requires_grad=False)
        sync = mt.GradSync([layer], dense=[extra])
        _loss(layer, rank).backward()
        sync.step()
        results[frozen] = layer
    frozen, live = results[True], results[False]
    out["frozen-gate-grad"] = None if frozen.gate_weight.grad is None else "set"
    out["frozen-expert-diff"] = max((a.grad - b.grad).abs().max().item() for a, b in
                                    zip(frozen.expert_params(), live.expert_params()))
    out["live-gate-grad"] = None if live.gate_weight.grad is None else "set"
    # Every parameter frozen: nothing to synchronize, step() does nothing.
    layer = mt.MoELayer(16, 32, 8, parallel="ep=2")
    for p in layer.parameters():
        p.requires_grad_(False)
    sync = mt.GradSync([layer])
    out["all-frozen"] = _error(lambda: (sync.step(), sync.step()))
    out["all-frozen-grads"] = [p.grad is None for p in layer.parameters()]
    return out


def run_all(outdir: str) -> List[Dict[str, Any]]:
    return run_on_ranks(run_rank, outdir)


STALL_S = 8.0  # rank 3's sleep before its forward: past the layer's 2 s timeout


def run_stall(rank: int) -> Dict[str, Any]:
    """An ep=4 layer with a 2 s timeout (its A2As span the world, so they run on the group
    made with it, not on the 60 s default group); rank 3 stalls before its forward: the
    others' collectives raise after about 2 s, and rank 3's then find their peers gone."""
    import time
    import moecomm.torch as mt
    layer = mt.MoELayer(16, 32, 8, parallel="ep=4", timeout=2)
    if rank == 3:
        time.sleep(STALL_S)
    start = time.perf_counter()
    try:
        layer(torch.randn(8, 16))
        error = None
    except RuntimeError as e:  # gloo's timeout or closed connection
        error = str(e)
    return {"error": error, "seconds": time.perf_counter() - start}


def run_stalled(outdir: str) -> List[Dict[str, Any]]:
    return run_on_ranks(run_stall, outdir)
