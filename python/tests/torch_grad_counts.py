"""Counts, on 4 gloo processes, the aten ops of one backward of MoELayer and of
SampleMovingMoE (placement=netmoe) that compute a tensor of a stacked expert weight's shape
[local experts, ...]: each (chunk, local expert)'s recomputed backward should produce only its
own expert's gradient, never a zero-filled stack added in full (work quadratic in local
experts)."""
from __future__ import annotations

import collections
from typing import Dict, Set, Tuple

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from torch_spawn import guarded, run_on_ranks

HIDDEN, FFN, SEQ = 6, 10, 4
# Local experts (4 ranks, ep=4): 8 and 32.
EXPERTS = (32, 128)
STRATEGIES = {"layer": "base=baseline,chunks=2", "netmoe": "base=netmoe,chunks=2"}


class StackedOps(TorchDispatchMode):
    """Per aten op, how many of its outputs computed (allocated, or written in place) a
    tensor of one of ``shapes``; views (detach, slices) make nothing and are not counted."""

    def __init__(self, shapes: Set[Tuple[int, ...]]) -> None:
        super().__init__()
        self.shapes = shapes
        self.counts: Dict[str, int] = collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        alias = func._schema.returns[0].alias_info if func._schema.returns else None
        if alias is None or alias.is_write:
            for o in out if isinstance(out, (tuple, list)) else [out]:
                if isinstance(o, torch.Tensor) and tuple(o.shape) in self.shapes:
                    self.counts[str(func)] += 1
        return out


def count(kind: str, experts: int, rank: int) -> Dict[str, int]:
    import moecomm.torch as mt
    gen = torch.Generator().manual_seed(rank)
    tokens = 4 * experts  # every local expert gets rows from every source, in each chunk
    if kind == "layer":
        layer = mt.MoELayer(HIDDEN, FFN, experts, 2, strategy=STRATEGIES[kind],
                            parallel="ep=4", tokens=tokens)
        x = torch.randn(tokens, HIDDEN, generator=gen)
    else:
        layer = mt.SampleMovingMoE(HIDDEN, FFN, experts, 2, strategy=STRATEGIES[kind],
                                   parallel="ep=4", samples=tokens // SEQ, seq_len=SEQ)
        x = torch.randn(tokens // SEQ, SEQ, HIDDEN, generator=gen)
    out = layer(x.requires_grad_())
    y = out if kind == "layer" else out.y
    # The 3-D stacked weights (w1, w2): no activation is 3-D, so none is miscounted.
    shapes = {tuple(getattr(layer, n).shape) for n in ("w1", "w2")}
    assert len(shapes) == 2 and all(len(s) == 3 and s[0] == experts // 4 for s in shapes)
    mode = StackedOps(shapes)
    with mode:
        y.sum().backward()
    return dict(mode.counts)


def run_rank(rank: int) -> dict:
    return {f"{kind}-{e}": guarded(count, kind, e, rank) for kind in STRATEGIES
            for e in EXPERTS}


def run_all(outdir: str):
    return run_on_ranks(run_rank, outdir)
