"""Where every row of one layer's token exchange goes, computed on the host from the counts
(one read of them per layer and forward: the only host sync of the token path).

Rows are cut as moecomm's runtime cuts them (rt/exchange_chunks.h): member i's rows for
member j's local expert l form a block of ``counts[i, j, l]`` rows; chunk c of n of a block
of S rows is rows [S c / n, S (c+1) / n) (integer division), and TP part v of U of a chunk
its rows split the same way (MoNTA's drop: TP member u sends part u).

A phase orders this member's rows (c, v, j, l, p): chunk, part, destination, local expert,
row of the block. Chunk c's part u is then one contiguous slice (the dispatch's payload, a
view), and what the combine returns for chunk c, every part, is the next slice: the phase
needs no permutation on the sender's side. The experts' side holds, per chunk, what the
dispatch (and MoNTA's AllGather of parts) delivered, ordered (v, i, l, p); an expert op over
chunks C reads it ordered (l, c, i, v, p), one permutation, so each local expert's rows are
contiguous. Every index here is a range of whole blocks, built without sorting.

A row of the experts' side has one identity whatever the chunking: (l, i, p), its
``canonical`` id, so the backward (which may chunk differently: FSMoE's per-phase degree)
finds the forward's saved activations of its rows.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch

from .expert_compute import Batches, pad_positions, padded_rows


def cut(counts: np.ndarray, n: int, parts: int) -> Tuple[np.ndarray, np.ndarray]:
    """(lo, hi), each [n, parts, *counts.shape]: rows [lo, hi) of each block in chunk c of n,
    part v of ``parts``."""
    shape = (1,) * counts.ndim
    c = np.arange(n).reshape((n, 1) + shape)
    v = np.arange(parts).reshape((1, parts) + shape)
    lo_c = counts * c // n
    m = counts * (c + 1) // n - lo_c
    return lo_c + m * v // parts, lo_c + m * (v + 1) // parts


def ranges(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """The rows of blocks [start, start + length), concatenated in the arrays' order."""
    starts, lengths = starts.ravel().astype(np.int64), lengths.ravel().astype(np.int64)
    total = int(lengths.sum())
    if total == 0:
        return np.zeros(0, np.int64)
    ends = np.cumsum(lengths)
    return np.repeat(starts - (ends - lengths), lengths) + np.arange(total, dtype=np.int64)


def exclusive_cumsum(a: np.ndarray) -> np.ndarray:
    flat = a.ravel()
    return (np.cumsum(flat) - flat).reshape(a.shape)


def regroup(sizes: np.ndarray, axes: Sequence[int]) -> np.ndarray:
    """Rows of a buffer of blocks laid out in ``sizes``' order (C order), reordered so that
    the blocks come in the order of ``sizes.transpose(axes)``: the index that gathers it."""
    starts = exclusive_cumsum(sizes)
    return ranges(starts.transpose(axes), sizes.transpose(axes))


def on_device(a: np.ndarray, device: torch.device) -> torch.Tensor:
    """A host index on ``device``: a copy to a GPU, which the host does not wait for (on
    the CPU, the array's own memory)."""
    return torch.from_numpy(a).to(device, non_blocking=True)


def inverse(perm: np.ndarray) -> np.ndarray:
    inv = np.empty_like(perm)
    inv[perm] = np.arange(perm.size, dtype=perm.dtype)
    return inv


class Indices:
    """Index arrays gathered on the host and sent to the device in one copy."""

    def __init__(self) -> None:
        self._arrays: List[np.ndarray] = []

    def add(self, a: np.ndarray) -> int:
        self._arrays.append(a)
        return len(self._arrays) - 1

    def to(self, device: torch.device) -> List[torch.Tensor]:
        if not self._arrays:
            return []
        flat = on_device(np.concatenate(self._arrays), device)
        return list(torch.split(flat, [a.size for a in self._arrays]))


@dataclass
class ExpertRows:
    """The rows one expert op computes on, ordered (l, c, i, v, p): ``sizes[l]`` rows per
    local expert (host ints), their ``canonical`` ids, how its GEMMs run (``batches``), the
    index that gathers the GEMMs' layout (padding included) from the op's chunks' received
    rows concatenated (``gather``; None: they are that layout already) and the one that takes
    chunk c's rows back in received order from the op's output (``back[c]``)."""
    chunks: Tuple[int, ...]
    sizes: List[int]
    canonical: np.ndarray
    gather: Optional[torch.Tensor]
    back: Dict[int, torch.Tensor]
    batches: Batches


class ExchangeLayout:
    """Who sends what in one layer: ``counts[i, j, l]`` rows EP member i sends member j for
    its local expert l (every member knows all of it); ``me``: this member; ``parts``/``part``:
    MoNTA's TP parts and this member's."""

    def __init__(self, counts: np.ndarray, me: int, parts: int, part: int) -> None:
        self.counts = counts.astype(np.int64)
        self.me, self.parts, self.part = me, parts, part
        self.members, _, self.local = counts.shape
        self.rows = int(self.counts[me].sum())  # this member's kept rows
        # Each (j, l) block's first row in the (j, l, p) order of the sorted slots.
        self.send_offset = exclusive_cumsum(self.counts[me])
        # Each (l, i) block's first canonical id on the experts' side.
        self.canonical_base = exclusive_cumsum(self.counts[:, me, :].T)  # [l, i]
        self._phases: Dict[int, "PhasePlan"] = {}

    def phase(self, chunks: int) -> "PhasePlan":
        if chunks not in self._phases:
            self._phases[chunks] = PhasePlan(self, chunks)
        return self._phases[chunks]

    def conversion(self, src: int, dst: int) -> Optional[np.ndarray]:
        """The index that reorders rows in phase order with ``src`` chunks into the order with
        ``dst`` chunks (None: the same order)."""
        if src == dst:
            return None
        a, b = self.phase(src).order, self.phase(dst).order
        return inverse(a)[b]


class PhasePlan:
    """One phase's cut of the layout into ``n`` chunks (host arrays; ``bind`` adds the
    device indices of the expert ops)."""

    def __init__(self, lay: ExchangeLayout, n: int) -> None:
        self.lay, self.n = lay, n
        me, U = lay.me, lay.parts
        lo, hi = cut(lay.counts, n, U)  # [n, U, i, j, l]
        self.lo, self.size = lo, hi - lo
        mine = self.size[:, :, me]  # [n, U, j, l]
        # Phase order (c, v, j, l, p) of the sorted slots (their (j, l, p) order).
        self.order = ranges(lay.send_offset[None, None] + lo[:, :, me], mine)
        rows = mine.sum(axis=(2, 3))  # [n, U]
        self.start = exclusive_cumsum(rows)
        self.rows = rows
        self.total = int(rows.sum())
        # Per chunk, what arrives: [n, U, i, l] blocks of the rows sent to me.
        self.received = self.size[:, :, :, me, :]

    def payload(self, c: int) -> Tuple[int, int]:
        """Rows [lo, hi) of the phase order this member dispatches in chunk c (its part)."""
        s = int(self.start[c, self.lay.part])
        return s, s + int(self.rows[c, self.lay.part])

    def chunk_rows(self, c: int) -> Tuple[int, int]:
        """Rows [lo, hi) of the phase order chunk c's combine returns (every part)."""
        s = int(self.start[c, 0])
        return s, s + int(self.rows[c].sum())

    def dispatch_matrix(self, c: int) -> List[List[int]]:
        """Rows member i sends member j in chunk c's dispatch (part u)."""
        return self.size[c, self.lay.part].sum(axis=-1).tolist()

    def combine_matrix(self, c: int) -> List[List[int]]:
        return self.size[c, self.lay.part].sum(axis=-1).T.tolist()

    def gathered_counts(self, c: int) -> List[int]:
        """Rows of chunk c each part's member received (MoNTA's AllGather, ReduceScatter)."""
        return self.received[c].sum(axis=(1, 2)).tolist()

    def returned_counts(self, c: int) -> List[int]:
        """Rows of chunk c each part's combine returned to this member (the TP AllGather)."""
        return self.rows[c].tolist()

    def expert_rows(self, chunk_sets: Sequence[Tuple[int, ...]], device: torch.device
                    ) -> Dict[Tuple[int, ...], ExpertRows]:
        """The rows of each expert op (by its chunks), with their device indices in one copy."""
        lay, me = self.lay, self.lay.me
        indices = Indices()
        staged = {}
        for chunks in chunk_sets:
            sizes = self.received[list(chunks)]  # [C, v, i, l]: concatenated received order
            perm = regroup(sizes, (3, 0, 2, 1))  # -> (l, c, i, v)
            sizes_c = sizes.sum(axis=(1, 2, 3))
            per_expert = sizes.sum(axis=(0, 1, 2)).tolist()
            padded = padded_rows(per_expert)
            if padded is not None:  # the GEMMs' layout: each expert's rows padded to m
                most, real = padded
                fill = pad_positions(len(per_expert) * most, real)
                gather = np.zeros(len(per_expert) * most, np.int64)  # a pad row reads row 0
                gather[real] = perm
                where = real[inverse(perm)]  # received row -> its row in the GEMMs' layout
                pad = (most, indices.add(real), indices.add(fill))
            else:
                gather, where, pad = perm, inverse(perm), None
            identity = pad is None and np.array_equal(perm, np.arange(perm.size))
            ends = np.cumsum(sizes_c)
            back = {c: indices.add(where[e - int(n):e]) for c, n, e in zip(chunks, sizes_c, ends)}
            starts = (lay.canonical_base.T[None, None]  # [1, 1, i, l]
                      + self.lo[list(chunks)][:, :, :, me, :])  # [C, v, i, l]
            canonical = ranges(starts.transpose(3, 0, 2, 1), sizes.transpose(3, 0, 2, 1))
            staged[chunks] = (per_expert, canonical, None if identity else indices.add(gather),
                              back, pad)
        on_device = indices.to(device)
        out = {}
        for chunks, (sizes, canonical, g, back, pad) in staged.items():
            padding = None if pad is None else (pad[0], on_device[pad[1]], on_device[pad[2]])
            out[chunks] = ExpertRows(chunks, sizes, canonical, None if g is None else on_device[g],
                                     {c: on_device[k] for c, k in back.items()},
                                     Batches(sizes, padding))
        return out
