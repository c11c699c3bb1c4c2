"""The torch executor's SR codec as it was before it moved to torch ops: every expert tensor
through ``.cpu().numpy()`` into moecomm's C++ codec (``_moecomm.sr_encode`` / ``sr_decode``,
nn/sr_codec.h) and back, one tensor of one expert at a time. Kept as the reference the torch
codec (moecomm.torch.hybrid.SharedResidual) is checked against bit for bit
(test_torch_sr_codec.py) and timed against (bench/bench_sr_codec_torch.py)."""
from __future__ import annotations

from typing import List, Sequence

import numpy as np
import torch

from moecomm import _moecomm


def _np(t: torch.Tensor) -> np.ndarray:
    return t.detach().reshape(-1).cpu().numpy()  # .cpu(): only GPU tensors copy


class HostSharedResidual:
    """SharedResidual's interface (encode, decode, own_sum, set_shared_sum) on the host."""

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
        return torch.cat([p.detach().sum(0).reshape(-1) for p in own])

    def set_shared_sum(self, summed: torch.Tensor) -> None:
        parts = torch.split(summed, self.numel)
        self.shared = [(q / self.experts).cpu().numpy().astype(np.float32) for q in parts]
