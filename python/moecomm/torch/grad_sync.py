"""moecomm.torch.GradSync: data-parallel gradient synchronization as the schedule's gradient
ops say (in place of DDP's buckets): each layer's dense gradients (the gate, and the model's
other parameters with the first layer) over the dense data-parallel group, its experts'
over the expert-data-parallel group, cut into the partitions the strategy's grad_sync and
grad_partitions give (Lina Sec. 4.2, FSMoE Sec. 5), in the schedule's order. They run after
the backward, so no A2A is in flight beside them: overlapping them with the backward's A2As
(where Lina's A2A-first gate would decide) is not built here."""
from __future__ import annotations

from typing import Dict, Iterable, List, Sequence

import torch

from .. import Error
from . import collectives as col
from .layer import MoELayer
from .runner import OpTimes, Runner

GRAD_OPS = ("grad.dense.allreduce", "grad.expert.allreduce")


class GradSync:
    """Sums (or, with ``average``, averages) gradients over the data-parallel replicas.

    Args:
        layers: the model's MoELayers, input side first.
        dense: the model's parameters outside the layers (attention, embeddings, head):
            synchronized with the first layer's dense gradients.
        average: divide by the group size, as DDP does (default: sum).

    Call :meth:`step` after ``loss.backward()`` and before the optimizer's step.
    """

    def __init__(self, layers: Sequence[MoELayer], dense: Iterable[torch.nn.Parameter] = (),
                 average: bool = False) -> None:
        if not layers:
            raise Error("GradSync: give at least one MoELayer")
        self.layers = list(layers)
        self.average = average
        self.extra = [p for p in dense if p.requires_grad]
        self.last_times: Dict[int, OpTimes] = {}

    def _params(self, index: int, name: str) -> List[torch.nn.Parameter]:
        layer = self.layers[index]
        if name == "grad.expert.allreduce":
            return layer.expert_params()
        return layer.dense_params() + (self.extra if index == 0 else [])

    def step(self) -> None:
        """Runs every layer's gradient ops, output side first (the order backward ends them)."""
        for index in reversed(range(len(self.layers))):
            layer = self.layers[index]
            ops = [o for o in layer.schedule.ops(layer.rank) if o.name in GRAD_OPS]
            flats = {name: self._flatten(index, name) for name in GRAD_OPS}
            times = OpTimes()
            kernels = {name: self._kernel(layer, flats[name]) for name in GRAD_OPS}
            Runner(kernels, times).run(ops)
            for name in GRAD_OPS:
                self._unflatten(index, name, flats[name])
            self.last_times[index] = times

    def _flatten(self, index: int, name: str) -> torch.Tensor:
        params = self._params(index, name)
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
        return torch.cat([g.reshape(-1) for g in grads]) if grads else torch.zeros(0)

    def _unflatten(self, index: int, name: str, flat: torch.Tensor) -> None:
        at = 0
        for p in self._params(index, name):
            n = p.numel()
            p.grad = flat[at:at + n].view_as(p).clone()
            at += n

    def _kernel(self, layer: MoELayer, flat: torch.Tensor):
        def run(op: object) -> col.Pending:
            coll = layer.schedule.collective(op.collective)
            parts = sum(1 for o in layer.schedule.ops(layer.rank) if o.name == op.name)
            p = max(op.chunk, 0)
            piece = flat[flat.numel() * p // parts:flat.numel() * (p + 1) // parts]
            pending = col.all_reduce(piece, layer.groups.get(coll.group))
            if not self.average:
                return pending
            return col.Pending(pending, lambda: piece.div_(len(coll.group)))
        return run
