"""HybridEP's experts on the wire in the torch executor (hybridep.txt Sec. IV): inside an
expert domain every member gathers the domain's experts (``moe.hybrid.expert_allgather``,
before the layer's compute, on the copy stream) and runs the tokens for them itself; the
copies' gradients return to their owners summed (``moe.hybrid.grad_reducescatter``). Across
domains tokens travel, to the member of the expert's domain at this member's offset
(Algorithm 1): the layer's exchange layout, not this module, routes them."""
from __future__ import annotations

from typing import List, Optional, Sequence

import numpy as np
import torch

from .. import _moecomm
from . import collectives as col
from .collectives import Pending


def _flat(tensors: Sequence[torch.Tensor], first: int, count: int) -> torch.Tensor:
    """Experts [first, first + count) of every stacked tensor, flattened, back to back."""
    return torch.cat([t[first:first + count].reshape(-1) for t in tensors])


def _np(t: torch.Tensor) -> np.ndarray:
    return t.detach().reshape(-1).cpu().numpy()  # .cpu(): only GPU tensors copy


class SharedResidual:
    """HybridEP's SR compression (Sec. IV-B) of one layer's domain experts, with the state it
    keeps across steps, as moecomm train's codec (rt/hybrid_codec.h) keeps it: each tensor of
    an expert travels as the top-k of its residual against a reference (nn/sr_codec.h, the
    C++ encoder and decoder), k = sr_kept(numel, compression). The reference is the shared
    expert (the average of the layer's E experts, refreshed by every backward's AllReduce;
    zero before the first, or always without ``shared_expert``), plus with ``feedback`` the
    residual R its holders have received so far (every holder and the owner move R alike)."""

    def __init__(self, compression: float, shared_expert: bool, feedback: bool, experts: int,
                 shapes: Sequence[Sequence[int]], slots: int) -> None:
        self.numel = [int(np.prod(s)) for s in shapes]
        self.shapes = [tuple(s) for s in shapes]
        self.kept = [_moecomm.sr_kept(n, compression) for n in self.numel]
        self.experts = experts
        self.shared = [np.zeros(n, np.float32) for n in self.numel] if shared_expert else None
        self.received = ([[np.zeros(n, np.float32) for n in self.numel] for _ in range(slots)]
                         if feedback else None)
        self.empty = np.zeros(0, np.float32)

    def _reference(self, slot: int, t: int) -> np.ndarray:
        s = self.shared[t] if self.shared is not None else self.empty
        if self.received is None:
            return s
        return (s if s.size else 0) + self.received[slot][t]

    def _keep(self, slot: int, t: int, copy: np.ndarray) -> None:
        if self.received is not None:
            self.received[slot][t] = copy - (self.shared[t] if self.shared is not None else 0)

    def encode(self, own: Sequence[torch.Tensor], first_slot: int) -> torch.Tensor:
        """This member's experts, encoded back to back (its AllGather block)."""
        out = []
        for j in range(own[0].shape[0]):
            for t, p in enumerate(own):
                ref = self._reference(first_slot + j, t)
                enc = _moecomm.sr_encode(_np(p[j]), ref, self.kept[t])
                self._keep(first_slot + j, t, _moecomm.sr_decode(enc, ref, self.numel[t]))
                out.append(enc)
        return torch.from_numpy(np.concatenate(out)).to(own[0].device)

    def decode(self, blocks: torch.Tensor, own: Sequence[torch.Tensor], offset: int
               ) -> List[torch.Tensor]:
        """Every member's block into the domain's copies; the owner keeps its exact weights."""
        local, data = own[0].shape[0], blocks.cpu().numpy()
        copies = [p.new_empty((blocks.shape[0] * local, *p.shape[1:])) for p in own]
        for m in range(blocks.shape[0]):
            at = 0
            for j in range(local):
                slot = m * local + j
                for t, p in enumerate(own):
                    size = 8 * self.kept[t]
                    if m == offset:
                        copies[t][slot] = p[j].detach()
                    else:
                        w = _moecomm.sr_decode(data[m, at:at + size], self._reference(slot, t),
                                               self.numel[t])
                        self._keep(slot, t, w)
                        copies[t][slot] = torch.from_numpy(w).reshape(self.shapes[t]).to(p.device)
                    at += size
        return copies

    def own_sum(self, own: Sequence[torch.Tensor]) -> torch.Tensor:
        """This member's experts summed, flat: AllReduced over the EP group, E times the next
        shared expert."""
        return torch.cat([p.detach().sum(0).reshape(-1) for p in own])

    def set_shared_sum(self, summed: torch.Tensor) -> None:
        parts = torch.split(summed, self.numel)
        self.shared = [(q / self.experts).cpu().numpy().astype(np.float32) for q in parts]


class DomainExperts:
    """The domain's experts on this member: ``copies`` holds, per expert parameter, the
    ``domain x local`` experts in position order (this member's own among them)."""

    def __init__(self, group: object, domain: int, offset: int, local: int,
                 codec: Optional[SharedResidual] = None) -> None:
        self.group = group
        self.domain = domain
        self.offset = offset
        self.local = local
        self.codec = codec
        self.copies: Optional[List[torch.Tensor]] = None
        self.own_grads: Optional[List[torch.Tensor]] = None

    def gather(self, params: Sequence[torch.Tensor]) -> Pending:
        """The domain AllGather of every member's experts, as they are or SR-encoded."""
        if self.codec is None:
            mine = _flat(params, 0, self.local)
        else:
            mine = self.codec.encode(params, self.offset * self.local)
        pending = col.all_gather_v(mine, [mine.numel()] * self.domain, self.group)

        def unpack() -> torch.Tensor:
            blocks = pending.wait().reshape(self.domain, -1)
            if self.codec is None:
                self.copies = self._unflatten(blocks, params)
            else:
                self.copies = self.codec.decode(blocks, params, self.offset)
            return blocks

        return Pending(pending, unpack)

    def share(self, params: Sequence[torch.Tensor], group: object) -> Pending:
        """The AllReduce that makes the next shared expert (``moe.hybrid.shared_allreduce``)."""
        pending = col.all_reduce(self.codec.own_sum(params), group)
        return Pending(pending, lambda: self.codec.set_shared_sum(pending.wait()))

    def _unflatten(self, blocks: torch.Tensor, like: Sequence[torch.Tensor]) -> List[torch.Tensor]:
        out, at = [], 0
        for p in like:
            piece = blocks[:, at:at + p.numel()].reshape(self.domain * self.local, *p.shape[1:])
            out.append(piece.contiguous())
            at += p.numel()
        return out

    def return_grads(self, copy_grads: Sequence[torch.Tensor],
                     params: Sequence[torch.Tensor]) -> Pending:
        """The copies' gradients summed into their owners' (ReduceScatter over the domain):
        member m's block is the gradients of the experts at its position."""
        rows = torch.stack([_flat(copy_grads, m * self.local, self.local)
                            for m in range(self.domain)])
        pending = col.reduce_scatter_v(rows, [1] * self.domain, self.group)

        def unpack() -> torch.Tensor:
            got = pending.wait().reshape(-1)
            sizes = [p.numel() for p in params]
            self.own_grads = [g.reshape(p.shape) for g, p in zip(torch.split(got, sizes), params)]
            return got

        return Pending(pending, unpack)
