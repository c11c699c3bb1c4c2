"""Counts, on 4 gloo processes, what one MoELayer forward and one backward do on the host:
host syncs (the calls that make the host wait for the device on a GPU) and torch ops outside
the experts' GEMMs, for several expert counts and EP sizes of each strategy."""
from __future__ import annotations

import collections
from typing import Any, Dict

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

from torch_spawn import guarded, run_on_ranks

HIDDEN, FFN, TOKENS = 8, 16, 2048  # no chunk is empty at 256 experts and ep=2: the same collectives run
# Tensor calls that wait for the device on a GPU (a device -> host read, or a result whose
# size depends on the data). Tensor.numpy() is not one: it refuses device tensors.
SYNCS = frozenset(("tolist", "item", "cpu", "nonzero", "__bool__", "__int__", "__float__",
                   "__index__", "unique", "masked_select", "bincount", "argwhere"))
# (case, strategy, parallel, [(experts, what varies)])
CASES = [
    ("baseline", "baseline", "ep=4", (8, 256)),
    ("fsmoe-chunks4", "base=fsmoe,chunks=4", "ep=4", (8, 256)),
    ("lina", "lina", "ep=4", (8, 256)),
    ("monta-o2", "monta-o2", "tp=2,ep=2,esp=2", (8, 256)),
    ("fsmoe-r3-r2", "base=fsmoe,chunks_fwd=3,chunks_bwd=2", "ep=4", (8, 256)),
    ("fsmoe-recompute", "base=fsmoe,chunks=2,recompute_experts=true", "ep=4", (8, 256)),
    ("baseline-ep2", "baseline", "ep=2", (8, 256)),
    ("fsmoe-chunks4-ep2", "base=fsmoe,chunks=4", "ep=2", (8, 256)),
]
# a2a=dedup on two nodes of 2 ranks: its dispatch steps read their message sizes (one count
# exchange each, read once on the host); the combine reads none.
TWO_NODES = {"name": "2x2", "levels": [
    {"name": "node", "count": 2, "bandwidth_GBps": 1, "latency_us": 20},
    {"name": "gpu", "count": 2, "bandwidth_GBps": 10, "latency_us": 5}],
    "device": {"tflops": 1, "memory_GB": 16, "memory_bandwidth_GBps": 50}}
DEDUP_CASES = [
    ("dedup", "base=baseline,a2a=dedup", "ep=4", (8, 256)),
    ("dedup-chunks2", "base=fsmoe,a2a=dedup,chunks=2", "ep=4", (8, 256)),
]


class Syncs(TorchFunctionMode):
    def __init__(self) -> None:
        super().__init__()
        self.calls: Dict[str, int] = collections.Counter()

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", str(func))
        if name in SYNCS or (name == "to" and "cpu" in [str(a) for a in args[1:]]
                                      and not kwargs.get("non_blocking")) or (
                name == "repeat_interleave" and len(args) > 1
                and isinstance(args[1], torch.Tensor) and "output_size" not in kwargs):
            self.calls[name] += 1
        return func(*args, **kwargs)


class Ops(TorchDispatchMode):
    """aten ops that compute (views and reshapes make nothing), outside the experts."""

    def __init__(self) -> None:
        super().__init__()
        self.outside = 0
        self.inside = 0
        self.in_experts = 0  # depth of the experts' calls

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        alias = func._schema.returns[0].alias_info if func._schema.returns else None
        if alias is None or alias.is_write:
            if self.in_experts:
                self.inside += 1
            else:
                self.outside += 1
        return out


def watch_experts(ops: Ops):
    """Marks the experts' compute for ``ops``: ExpertBank's methods, and the layout their
    batched GEMMs run on (Batches: rows padded to the largest expert's count)."""
    from moecomm.torch import expert_compute as ec

    def wrap(cls, name):
        real = getattr(cls, name)

        def marked(self, *args, **kwargs):
            ops.in_experts += 1
            try:
                return real(self, *args, **kwargs)
            finally:
                ops.in_experts -= 1
        setattr(cls, name, marked)
        return lambda: setattr(cls, name, real)
    return [wrap(ec.ExpertBank, n) for n in ("forward", "backward", "recompute")] + [
        wrap(ec.Batches, n) for n in ("to_compute", "from_compute")]


def count(strategy: str, parallel: str, experts: int, rank: int,
          cluster: Any = None) -> Dict[str, Any]:
    import moecomm.torch as mt
    layer = mt.MoELayer(HIDDEN, FFN, experts, 2, strategy=strategy, parallel=parallel,
                        tokens=TOKENS, cluster=cluster)
    gen = torch.Generator().manual_seed(rank // 2 if "tp=2" in parallel else rank)
    x = torch.randn(TOKENS, HIDDEN, generator=gen).requires_grad_()
    dy = torch.randn(TOKENS, HIDDEN, generator=gen)
    layer(x).mul(dy).sum().backward()  # warm-up: caches (routing plans) as a training loop has
    result: Dict[str, Any] = {}
    out = None
    for phase in ("forward", "backward"):
        syncs, ops = Syncs(), Ops()
        restore = watch_experts(ops)
        try:
            with syncs, ops:
                if phase == "forward":
                    out = layer(x)
                else:
                    torch.autograd.backward(out, dy)
        finally:
            for r in restore:
                r()
        result[phase] = {"syncs": dict(syncs.calls), "ops": ops.outside,
                         "expert_ops": ops.inside}
    return result


def run_rank(rank: int) -> dict:
    out = {f"{case}-{e}": guarded(count, strategy, parallel, e, rank)
           for case, strategy, parallel, experts in CASES for e in experts}
    out.update({f"{case}-{e}": guarded(count, strategy, parallel, e, rank, TWO_NODES)
                for case, strategy, parallel, experts in DEDUP_CASES for e in experts})
    return out


def run_all(outdir: str):
    return run_on_ranks(run_rank, outdir)
