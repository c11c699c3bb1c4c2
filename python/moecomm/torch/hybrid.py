"""HybridEP's experts on the wire in the torch executor (hybridep.txt Sec. IV): inside an
expert domain every member gathers the domain's experts (``moe.hybrid.expert_allgather``,
before the layer's compute, on the copy stream) and runs the tokens for them itself; the
copies' gradients return to their owners summed (``moe.hybrid.grad_reducescatter``). Across
domains tokens travel, to the member of the expert's domain at this member's offset
(Algorithm 1): the layer's exchange layout, not this module, routes them."""
from __future__ import annotations

from typing import List, Optional, Sequence

import torch

from . import collectives as col
from .collectives import Pending


def _flat(tensors: Sequence[torch.Tensor], first: int, count: int) -> torch.Tensor:
    """Experts [first, first + count) of every stacked tensor, flattened, back to back."""
    return torch.cat([t[first:first + count].reshape(-1) for t in tensors])


class DomainExperts:
    """The domain's experts on this member: ``copies`` holds, per expert parameter, the
    ``domain x local`` experts in position order (this member's own among them)."""

    def __init__(self, group: object, domain: int, offset: int, local: int) -> None:
        self.group = group
        self.domain = domain
        self.offset = offset
        self.local = local
        self.copies: Optional[List[torch.Tensor]] = None
        self.own_grads: Optional[List[torch.Tensor]] = None

    def gather(self, params: Sequence[torch.Tensor]) -> Pending:
        """The domain AllGather of every member's experts (uncompressed: SR's 1)."""
        mine = _flat(params, 0, self.local)
        pending = col.all_gather_v(mine, [mine.numel()] * self.domain, self.group)

        def unpack() -> torch.Tensor:
            blocks = pending.wait().reshape(self.domain, -1)
            self.copies = self._unflatten(blocks, params)
            return blocks

        return Pending(pending, unpack)

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
