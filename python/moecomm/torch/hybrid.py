"""HybridEP's experts on the wire in the torch executor (hybridep.txt Sec. IV): inside an
expert domain every member gathers the domain's experts (``moe.hybrid.expert_allgather``,
before the layer's compute, on the copy stream) and runs the tokens for them itself; the
copies' gradients return to their owners summed (``moe.hybrid.grad_reducescatter``). Across
domains tokens travel, to the member of the expert's domain at this member's offset
(Algorithm 1): the layer's exchange layout, not this module, routes them."""
from __future__ import annotations

import math
from typing import List, Optional, Sequence

import torch

from .. import _moecomm
from . import collectives as col
from .collectives import Pending


def _flat(tensors: Sequence[torch.Tensor], first: int, count: int) -> torch.Tensor:
    """Experts [first, first + count) of every stacked tensor, flattened, back to back."""
    return torch.cat([t[first:first + count].reshape(-1) for t in tensors])


def _magnitude(r: torch.Tensor) -> torch.Tensor:
    """|r| as nn/sr_codec.cpp ranks it: the float's bits without the sign, as int32, which
    orders numbers by magnitude and puts NaN above inf (a total order, like the C++ one)."""
    return r.view(torch.int32) & 0x7FFFFFFF


def _top_indices(mag: torch.Tensor, k: int) -> torch.Tensor:
    """Per row of ``mag`` ([rows, n] int32), the indices of its k largest entries in
    increasing order, ties to the lower index: nn/sr_codec.cpp's selection (every entry above
    the k-th largest t, then the lowest-index entries equal to t), the same indices on every
    device. On a GPU sync-free (_top_indices_sync_free); on the CPU, where a data-dependent
    size costs no device sync, the k-th by kthvalue (a quickselect: there, 2-3x faster than
    topk), ties counted only where there are too many, and ``nonzero`` compacts."""
    if mag.is_cuda:
        return _top_indices_sync_free(mag, k)
    t = mag.kthvalue(mag.shape[1] - k + 1, dim=1, keepdim=True).values
    above, tie = mag > t, mag == t
    need = k - above.sum(1, keepdim=True)  # >= 1: the k-th itself
    if bool((tie.sum(1, keepdim=True) > need).any()):
        tie &= tie.cumsum(1) <= need
    return (above | tie).nonzero()[:, 1].reshape(mag.shape[0], k)


def _top_indices_sync_free(mag: torch.Tensor, k: int) -> torch.Tensor:
    """_top_indices with no data-dependent size: topk of a key unique per entry, |r|'s bits
    above the reversed index (of equal |r| the lower index is the larger key), then the k
    indices sorted. On a GPU topk is a radix select: on an H100 (torch 2.11) a member's
    encode + decode of 1024 x 4096 experts took 4-6 ms so, 84 ms by kthvalue."""
    n = mag.shape[1]
    reverse = torch.arange(n - 1, -1, -1, device=mag.device)
    key = (mag.long() << 31) | reverse  # |r| < 2^31, n <= 2^31 - 1: fits in 62 bits
    return key.topk(k, dim=1, sorted=False).indices.sort(dim=1).values


def sr_encode(weights: torch.Tensor, reference: Optional[torch.Tensor], k: int) -> torch.Tensor:
    """nn/sr_encode on every row of ``weights`` ([rows, n]) with torch ops on its device:
    the k entries of largest |w - ref| (ref None: 0) as [rows, 8 k] bytes, each row k fp32
    values then k int32 indices, increasing: the C++ encoder's bytes (python/tests/
    test_torch_sr_codec.py checks them equal). ``reference`` is [rows, n] or [n]."""
    r = weights.float() if reference is None else weights.float() - reference
    index = _top_indices(_magnitude(r), k)
    # Joined as int32 (a uint8 cat is several times slower on the CPU), then seen as bytes.
    return torch.cat([r.gather(1, index).view(torch.int32), index.to(torch.int32)],
                     1).view(torch.uint8)


def sr_decode(encoded: torch.Tensor, reference: Optional[torch.Tensor], numel: int
              ) -> torch.Tensor:
    """nn/sr_decode on every row of ``encoded`` ([rows, 8 k] bytes from sr_encode): the
    reference ([rows, n] or [n]; None: 0) with the kept residual added at its indices, as
    [rows, n] fp32. Without a reference the kept values land as they are (-0.0 stays -0.0,
    as in C++). The indices are not validated (the C++ decoder does, at the cost here of a
    device sync): the bytes come from sr_encode on another member."""
    rows, k = encoded.shape[0], encoded.shape[1] // 8
    values = encoded[:, :4 * k].view(torch.float32)
    index = encoded[:, 4 * k:].view(torch.int32).long()
    if reference is None:
        out = torch.zeros(rows, numel, dtype=torch.float32, device=encoded.device)
        return out.scatter_(1, index, values)
    out = reference.expand(rows, numel).clone(memory_format=torch.contiguous_format)
    return out.scatter_(1, index, out.gather(1, index) + values)


class SharedResidual:
    """HybridEP's SR compression (Sec. IV-B) of one layer's domain experts, with the state it
    keeps across steps, as moecomm train's codec (rt/hybrid_codec.h) keeps it: each tensor of
    an expert travels as the top-k of its residual against a reference (sr_encode above: the
    C++ encoder's math and bytes, in torch ops on the experts' device, so a GPU's experts
    never visit the host), k = sr_kept(numel, compression). The reference is the shared
    expert (the average of the layer's E experts, refreshed by every backward's AllReduce;
    zero before the first, or always without ``shared_expert``), plus with ``feedback`` the
    residual R its holders have received so far (every holder and the owner move R alike).
    The state lives on the device of the first experts encoded."""

    def __init__(self, compression: float, shared_expert: bool, feedback: bool, experts: int,
                 shapes: Sequence[Sequence[int]], slots: int) -> None:
        self.numel = [math.prod(int(d) for d in s) for s in shapes]
        self.shapes = [tuple(s) for s in shapes]
        self.kept = [_moecomm.sr_kept(n, compression) for n in self.numel]
        self.experts = experts
        self.slots = slots
        self.shared_expert = shared_expert
        self.feedback = feedback
        self.shared: Optional[List[torch.Tensor]] = None  # per tensor, [numel]
        self.received: Optional[List[torch.Tensor]] = None  # per tensor, [slots, numel]

    def _state_on(self, device: torch.device) -> None:
        """The state on the experts' device: made there on first use, moved with them."""
        if self.shared_expert and self.shared is None:
            self.shared = [torch.zeros(n, device=device) for n in self.numel]
        if self.feedback and self.received is None:
            self.received = [torch.zeros(self.slots, n, device=device) for n in self.numel]
        if self.shared is not None and self.shared[0].device != device:
            self.shared = [s.to(device) for s in self.shared]
        if self.received is not None and self.received[0].device != device:
            self.received = [r.to(device) for r in self.received]

    def _reference(self, t: int, first: int, count: int) -> Optional[torch.Tensor]:
        """What slots [first, first + count) of tensor t are encoded against: s ([numel]), or
        with feedback s + R ([count, numel]; R itself without S, where the C++ runtime adds
        0 + R: the two agree bit for bit, as R holds no -0.0: it starts at +0.0, and a copy
        decoded against R, R + r, is -0.0 only where both are); None for zero."""
        s = self.shared[t] if self.shared is not None else None
        if self.received is None:
            return s
        r = self.received[t][first:first + count]
        return r if s is None else s + r

    def _keep(self, t: int, first: int, copies: torch.Tensor) -> None:
        """Feedback: after a decode against s + R, R = copy - s (nn's keep_residual)."""
        if self.received is not None:
            s = self.shared[t] if self.shared is not None else 0.0
            self.received[t][first:first + copies.shape[0]] = copies - s

    def encode(self, own: Sequence[torch.Tensor], first_slot: int) -> torch.Tensor:
        """This member's experts, encoded back to back, expert by expert and within one
        tensor by tensor (its AllGather block, uint8)."""
        self._state_on(own[0].device)
        local, parts = own[0].shape[0], []
        for t, p in enumerate(own):
            w = p.detach().reshape(local, self.numel[t])
            ref = self._reference(t, first_slot, local)
            enc = sr_encode(w, ref, self.kept[t])
            if self.received is not None:
                self._keep(t, first_slot, sr_decode(enc, ref, self.numel[t]))
            parts.append(enc.view(torch.int32))
        return torch.cat(parts, 1).view(torch.uint8).reshape(-1)

    def decode(self, blocks: torch.Tensor, own: Sequence[torch.Tensor], offset: int
               ) -> List[torch.Tensor]:
        """Every member's block into the domain's copies; the owner keeps its exact weights."""
        self._state_on(own[0].device)
        local = own[0].shape[0]
        mine, end = offset * local, (offset + 1) * local
        per_slot = blocks.reshape(blocks.shape[0] * local, -1)
        copies, at = [], 0
        for t, p in enumerate(own):
            size = 8 * self.kept[t]
            enc = per_slot[:, at:at + size]
            at += size
            parts = []
            for first, last in ((0, mine), (end, per_slot.shape[0])):
                if first == last:
                    continue
                w = sr_decode(enc[first:last], self._reference(t, first, last - first),
                              self.numel[t])
                self._keep(t, first, w)
                parts.append(w.to(p.dtype))
            parts.insert(1 if mine else 0, p.detach().reshape(local, -1))
            copies.append(torch.cat(parts).reshape(per_slot.shape[0], *self.shapes[t]))
        return copies

    def own_sum(self, own: Sequence[torch.Tensor]) -> torch.Tensor:
        """This member's experts summed, flat: AllReduced over the EP group, E times the next
        shared expert."""
        return torch.cat([p.detach().sum(0).reshape(-1) for p in own])

    def set_shared_sum(self, summed: torch.Tensor) -> None:
        parts = torch.split(summed, self.numel)
        self.shared = [(q / self.experts).float() for q in parts]


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
