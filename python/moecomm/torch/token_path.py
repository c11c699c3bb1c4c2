"""The MoE token path of one layer and phase, bound to the schedule's ops by role, as
moecomm's C++ runtime binds them (rt/model_binding.h):

  moe.dispatch.a2a            chunk c's rows to the experts' EP members (flat, 1DH or 2DH)
  moe.dispatch.esp_allgather  MoNTA's drop (tp_dispatch=drop-allgather): TP member u sends
                              part u of each chunk; the ESP group gathers the parts
  moe.dispatch.esp_allgather.copy   the gathered parts into the experts' layout (MoNTA O3)
  moe.expert                  the local experts on chunk c (chunk -1 with several chunks:
                              every chunk at once, experts that wait for the whole dispatch)
  moe.combine.esp_reducescatter / esp_allreduce   the ESP shards' partial outputs summed
  moe.combine.a2a             the rows back to their senders
  moe.combine.tp_allgather(.copy)   MoNTA's drop: the TP parts gathered and put in place

No knob has code here: chunks, parts, algorithms, which ops exist and their order all come
from the schedule's ops. The forward moves token rows; the backward moves their gradients
the same way (the backward's dispatch carries the output gradients to the experts).

Rows are laid out as moecomm's runtime lays them: a sender's rows sorted by (EP member j,
local expert l); chunk c of n of a block of S rows is rows [S c / n, S (c+1) / n) (integer
division), and TP part v of U of a chunk its rows split the same way.
"""
from __future__ import annotations

from typing import Callable, Dict, List, Optional, Tuple

import torch

from .. import _moecomm
from . import collectives as col
from .collectives import Pending
from .groups import ScheduleGroups

R = _moecomm.OpRole


def piece(count: int, c: int, n: int, v: int, parts: int) -> Tuple[int, int]:
    """Rows [lo, hi) of a block of ``count`` rows in chunk c of n, TP part v of ``parts``."""
    lo, hi = count * c // n, count * (c + 1) // n
    m = hi - lo
    return lo + m * v // parts, lo + m * (v + 1) // parts


class Layout:
    """Who sends what in one layer: ``counts[i][j][l]`` rows member i of the EP group sends
    member j for its local expert l (every member knows all of it)."""

    def __init__(self, counts: List[List[List[int]]], me: int, parts: int, part: int) -> None:
        self.counts = counts
        self.me = me
        self.members = len(counts)
        self.local = len(counts[0][0])
        self.parts = parts
        self.part = part
        # Offsets of this member's (j, l) blocks in its send rows.
        self.offset: Dict[Tuple[int, int], int] = {}
        at = 0
        for j in range(self.members):
            for l in range(self.local):
                self.offset[(j, l)] = at
                at += counts[me][j][l]
        self.rows = at

    def size(self, i: int, j: int, l: int, c: int, n: int, v: int) -> int:
        lo, hi = piece(self.counts[i][j][l], c, n, v, self.parts)
        return hi - lo

    def send_rows(self, j: int, l: int, c: int, n: int, v: int) -> Tuple[int, int]:
        lo, hi = piece(self.counts[self.me][j][l], c, n, v, self.parts)
        return self.offset[(j, l)] + lo, self.offset[(j, l)] + hi


# (local expert, rows, [(chunk, (source i, part v, local expert l))] of the rows' blocks) -> rows
Expert = Callable[[int, torch.Tensor, List[Tuple[int, Tuple[int, int, int]]]], torch.Tensor]


class TokenPath:
    """One phase of one layer: ``send`` rows in, ``result`` rows out (same layout).

    ``expert(l, rows)`` is the forward expert, or the backward's (output gradient rows in,
    input gradient rows out), set by the layer."""

    def __init__(self, layout: Layout, chunks: int, send: torch.Tensor, expert: Expert,
                 groups: ScheduleGroups, schedule: object) -> None:
        self.lay = layout
        self.n = chunks
        self.send = send
        self.expert_fn = expert
        self.groups = groups
        self.schedule = schedule
        self.result = send.new_zeros(send.shape)
        # By chunk: what the experts' side holds, keyed (source i, part v, local expert l).
        self.recv: List[Dict[Tuple[int, int, int], torch.Tensor]] = [dict() for _ in range(chunks)]
        self.out: List[Dict[Tuple[int, int, int], torch.Tensor]] = [dict() for _ in range(chunks)]
        self.reduced: List[Dict[Tuple[int, int], torch.Tensor]] = [dict() for _ in range(chunks)]
        # By chunk: what came back, keyed (part v, destination j, local expert l).
        self.back: List[Dict[Tuple[int, int, int], torch.Tensor]] = [dict() for _ in range(chunks)]
        # By chunk and local expert: the rows the experts read, and their blocks in order.
        self.expert_in: List[Optional[Dict[int, Tuple[torch.Tensor, list]]]] = [None] * chunks

    def kernels(self) -> Dict[object, Callable[[object], Optional[Pending]]]:
        return {R.dispatch_a2a: self.dispatch,
                R.dispatch_esp_allgather: self.gather,
                R.dispatch_esp_allgather_copy: lambda op: self.place(self._chunk(op)),
                R.expert: self.experts,
                R.combine_esp_reducescatter: self.reduce,
                R.combine_esp_allreduce: self.reduce,
                R.combine_a2a: self.combine,
                R.combine_tp_allgather: self.tp_gather,
                R.combine_tp_allgather_copy: lambda op: self.assemble(self._chunk(op))}

    @staticmethod
    def _chunk(op: object) -> int:
        return max(op.chunk, 0)

    def _group(self, op: object) -> Tuple[object, List[int]]:
        members = self.schedule.collective(op.collective).group
        return self.groups.get(members), members

    def _a2a(self, op: object, payload: torch.Tensor, size: Callable[[int, int], int]
             ) -> Pending:
        """The op's A2A-v of ``payload``, ``size(i, j)`` rows from member i to member j, as
        its collective's algorithm routes it (flat, 1DH, 2DH)."""
        members = range(self.lay.members)
        matrix = [[size(i, j) for j in members] for i in members]
        return col.a2a_by_algorithm(payload, matrix, self.lay.me,
                                    self.schedule.collective(op.collective), self.groups)

    # --- toward the experts
    def dispatch(self, op: object) -> Pending:
        lay, c, u = self.lay, self._chunk(op), self.lay.part
        rows = [self.send[slice(*lay.send_rows(j, l, c, self.n, u))]
                for j in range(lay.members) for l in range(lay.local)]
        payload = torch.cat(rows) if rows else self.send[:0]
        size = lambda i, j: sum(lay.size(i, j, l, c, self.n, u) for l in range(lay.local))
        pending = self._a2a(op, payload, size)

        def unpack() -> torch.Tensor:
            got = pending.wait()
            sizes = [lay.size(i, lay.me, l, c, self.n, u)
                     for i in range(lay.members) for l in range(lay.local)]
            keys = [(i, u, l) for i in range(lay.members) for l in range(lay.local)]
            self.recv[c].update(zip(keys, torch.split(got, sizes)))
            return got

        return Pending(pending, unpack)

    def _part_keys(self, v: int) -> List[Tuple[int, int, int]]:
        return [(i, v, l) for i in range(self.lay.members) for l in range(self.lay.local)]

    def _part_rows(self, c: int, v: int) -> int:
        return sum(self.lay.size(i, self.lay.me, l, c, self.n, v)
                   for i in range(self.lay.members) for l in range(self.lay.local))

    def gather(self, op: object) -> Pending:
        c, lay = self._chunk(op), self.lay
        group, _ = self._group(op)
        mine = torch.cat([self.recv[c][k] for k in self._part_keys(lay.part)])
        counts = [self._part_rows(c, v) for v in range(lay.parts)]
        pending = col.all_gather_v(mine, counts, group)

        def unpack() -> torch.Tensor:
            got = pending.wait()
            keys = [k for v in range(lay.parts) for k in self._part_keys(v)]
            sizes = [lay.size(i, lay.me, l, c, self.n, v) for (i, v, l) in keys]
            self.recv[c].update(zip(keys, torch.split(got, sizes)))
            return got

        return Pending(pending, unpack)

    def place(self, c: int) -> None:
        """The chunk's rows by local expert (MoNTA's reordering copy, Fig. 8); without a
        copy op the experts do it."""
        placed = {}
        for l in range(self.lay.local):
            keys = [k for k in sorted(self.recv[c]) if k[2] == l]
            placed[l] = (torch.cat([self.recv[c][k] for k in keys]), keys)
        self.expert_in[c] = placed

    def experts(self, op: object) -> None:
        chunks = list(range(self.n)) if op.chunk < 0 else [op.chunk]
        for c in chunks:
            if self.expert_in[c] is None:
                self.place(c)
        for l in range(self.lay.local):
            keys = [(c, k) for c in chunks for k in self.expert_in[c][l][1]]
            rows = torch.cat([self.expert_in[c][l][0] for c in chunks])
            y = self.expert_fn(l, rows, keys)
            sizes = [self.recv[c][k].shape[0] for c, k in keys]
            for (c, k), block in zip(keys, torch.split(y, sizes)):
                self.out[c][k] = block

    # --- back to the senders
    def reduce(self, op: object) -> Pending:
        c, lay = self._chunk(op), self.lay
        group, _ = self._group(op)
        if op.kind == "all_reduce":  # every shard holds every row: sum in place
            keys = self._part_keys(lay.part)
            pending = col.all_reduce(torch.cat([self.out[c][k] for k in keys]), group)
        else:
            keys_by_part = [self._part_keys(v) for v in range(lay.parts)]
            rows = torch.cat([self.out[c][k] for ks in keys_by_part for k in ks])
            counts = [self._part_rows(c, v) for v in range(lay.parts)]
            pending = col.reduce_scatter_v(rows, counts, group)
            keys = self._part_keys(lay.part)

        def unpack() -> torch.Tensor:
            got = pending.wait()
            sizes = [self.out[c][k].shape[0] for k in keys]
            for (i, _, l), block in zip(keys, torch.split(got, sizes)):
                self.reduced[c][(i, l)] = block
            return got

        return Pending(pending, unpack)

    def combine(self, op: object) -> Pending:
        c, lay, u = self._chunk(op), self.lay, self.lay.part
        if not self.reduced[c]:  # no ESP reduction: the experts' rows go back as they are
            for (i, v, l), block in self.out[c].items():
                self.reduced[c][(i, l)] = block
        rows = [self.reduced[c][(i, l)] for i in range(lay.members) for l in range(lay.local)]
        payload = torch.cat(rows)
        # The combine is the dispatch's transpose: member i sends j what j sent i.
        size = lambda i, j: sum(lay.size(j, i, l, c, self.n, u) for l in range(lay.local))
        pending = self._a2a(op, payload, size)

        def unpack() -> torch.Tensor:
            got = pending.wait()
            keys = [(u, j, l) for j in range(lay.members) for l in range(lay.local)]
            sizes = [lay.size(lay.me, j, l, c, self.n, u) for (_, j, l) in keys]
            self.back[c].update(zip(keys, torch.split(got, sizes)))
            return got

        return Pending(pending, unpack)

    def tp_gather(self, op: object) -> Pending:
        c, lay = self._chunk(op), self.lay
        group, _ = self._group(op)
        part_keys = lambda v: [(v, j, l) for j in range(lay.members) for l in range(lay.local)]
        size = lambda k: lay.size(lay.me, k[1], k[2], c, self.n, k[0])
        mine = torch.cat([self.back[c][k] for k in part_keys(lay.part)])
        counts = [sum(size(k) for k in part_keys(v)) for v in range(lay.parts)]
        pending = col.all_gather_v(mine, counts, group)

        def unpack() -> torch.Tensor:
            got = pending.wait()
            keys = [k for v in range(lay.parts) for k in part_keys(v)]
            self.back[c].update(zip(keys, torch.split(got, [size(k) for k in keys])))
            return got

        return Pending(pending, unpack)

    def assemble(self, c: int) -> None:
        """What came back for chunk c, into the send layout (MoNTA's reordering copy)."""
        for (v, j, l), block in self.back[c].items():
            lo, hi = self.lay.send_rows(j, l, c, self.n, v)
            self.result[lo:hi] = block

    def finish(self) -> torch.Tensor:
        for c in range(self.n):
            self.assemble(c)
        return self.result
