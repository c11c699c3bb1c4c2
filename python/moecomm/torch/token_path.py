"""The MoE token path of one layer and phase, bound to the schedule's ops by role, as
moecomm's C++ runtime binds them (rt/model_binding.h):

  moe.dispatch.a2a            chunk c's rows to the experts' EP members (as the collective's
                              routing plan says: flat, 1DH, 2DH, pairwise; dedup's rows,
                              deduplicated by token, in DedupTokenPath)
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

Where each row goes is exchange_plan's, computed once per layer from the counts: per chunk
the token path runs a constant number of torch ops outside the experts' GEMMs (a slice to
send, the collectives, one permutation to the experts' order and one back, one copy into
place), whatever the number of experts and members.

``piece`` and ``Layout`` describe the same cut with Python lists, for SampleMovingMoE.
"""
from __future__ import annotations

from typing import Callable, Dict, List, Optional, Tuple

import torch

from .. import Error, _moecomm
from . import collectives as col
from . import dedup
from .collectives import Pending
from .exchange_plan import ExpertRows, PhasePlan
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


# (the expert op's rows, their input rows in its order) -> their output rows, same order
Expert = Callable[[ExpertRows, torch.Tensor], torch.Tensor]


class TokenPath:
    """One phase of one layer: ``rows`` in phase order in (exchange_plan.PhasePlan), the
    rows that came back out (``finish()``), in the same order.

    ``expert(expert_rows, x)`` runs the local experts on ``x``, ordered as ``expert_rows``
    says (each local expert's rows contiguous): the forward experts, or their backward
    (output gradient rows in, input gradient rows out), set by the layer."""

    def __init__(self, plan: PhasePlan, rows: torch.Tensor, expert: Expert,
                 expert_rows: Dict[Tuple[int, ...], ExpertRows], groups: ScheduleGroups,
                 schedule: object) -> None:
        self.plan = plan
        self.lay = plan.lay
        self.rows = rows
        self.expert_fn = expert
        self.expert_rows = expert_rows
        self.groups = groups
        self.schedule = schedule
        n = plan.n
        # By chunk: what the experts' side received (order (v, i, l, p)), placed in the
        # experts' order (l, i, v, p) by a copy op, and the experts' output back in the
        # received order, summed over the ESP shards; what the combine returned.
        self.received: List[Optional[torch.Tensor]] = [None] * n
        self.placed: List[Optional[torch.Tensor]] = [None] * n
        self.out: List[Optional[torch.Tensor]] = [None] * n
        self.reduced: List[Optional[torch.Tensor]] = [None] * n
        self.back: List[Optional[torch.Tensor]] = [None] * n
        self.assembled = [False] * n
        self.result: Optional[torch.Tensor] = None  # the phase order's rows, chunk by chunk

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

    def _group(self, op: object) -> object:
        return self.groups.get(self.schedule.collective(op.collective).group)

    def _a2a(self, op: object, payload: torch.Tensor, matrix: List[List[int]]) -> Pending:
        return col.a2a_by_algorithm(payload, matrix, self.lay.me,
                                    self.schedule.collective(op.collective), self.groups)

    @staticmethod
    def _store(pending: Pending, into: list, c: int) -> Pending:
        def finish() -> torch.Tensor:
            into[c] = pending.wait()
            return into[c]
        return Pending(None, finish)

    # --- toward the experts
    def dispatch(self, op: object) -> Pending:
        c = self._chunk(op)
        lo, hi = self.plan.payload(c)
        pending = self._a2a(op, self.rows[lo:hi], self.plan.dispatch_matrix(c))
        return self._store(pending, self.received, c)

    def gather(self, op: object) -> Pending:
        c = self._chunk(op)
        pending = col.all_gather_v(self.received[c], self.plan.gathered_counts(c),
                                   self._group(op))
        return self._store(pending, self.received, c)

    def place(self, c: int) -> None:
        """Chunk c's rows by local expert (MoNTA's reordering copy, Fig. 8), where an expert
        op runs on chunk c alone; an op over several chunks reorders them all at once."""
        rows = self.expert_rows.get((c,))
        if rows is not None:
            self.placed[c] = self._take(self.received[c], rows.gather)

    @staticmethod
    def _take(t: torch.Tensor, index: Optional[torch.Tensor]) -> torch.Tensor:
        return t if index is None else t.index_select(0, index)

    def experts(self, op: object) -> None:
        chunks = tuple(range(self.plan.n)) if op.chunk < 0 else (op.chunk,)
        rows = self.expert_rows[chunks]
        if len(chunks) == 1 and self.placed[chunks[0]] is not None:
            x = self.placed[chunks[0]]
        else:
            got = [self.received[c] for c in chunks]
            x = self._take(got[0] if len(got) == 1 else torch.cat(got), rows.gather)
        y = self.expert_fn(rows, x)
        for c in chunks:
            self.out[c] = y if len(chunks) == 1 and rows.gather is None else \
                y.index_select(0, rows.back[c])

    # --- back to the senders
    def reduce(self, op: object) -> Pending:
        c = self._chunk(op)
        if op.kind == "all_reduce":  # every shard holds every row: sum in place
            pending = col.all_reduce(self.out[c], self._group(op))
        else:
            pending = col.reduce_scatter_v(self.out[c], self.plan.gathered_counts(c),
                                           self._group(op))
        return self._store(pending, self.reduced, c)

    def combine(self, op: object) -> Pending:
        c = self._chunk(op)
        rows = self.reduced[c] if self.reduced[c] is not None else self.out[c]
        # The combine is the dispatch's transpose: member i sends j what j sent i.
        pending = self._a2a(op, rows, self.plan.combine_matrix(c))
        return self._store(pending, self.back, c)

    def tp_gather(self, op: object) -> Pending:
        c = self._chunk(op)
        pending = col.all_gather_v(self.back[c], self.plan.returned_counts(c), self._group(op))
        return self._store(pending, self.back, c)

    def assemble(self, c: int) -> None:
        """What came back for chunk c, every part, into its place in the phase order."""
        if self.result is None:
            self.result = self.rows.new_empty(self.rows.shape)
        lo, hi = self.plan.chunk_rows(c)
        if hi > lo:
            self.result[lo:hi].copy_(self.back[c])
        self.assembled[c] = True

    def finish(self) -> torch.Tensor:
        if self.plan.n == 1 and not self.assembled[0] and self.back[0] is not None:
            return self.back[0]  # one chunk: what came back is the phase order already
        for c in range(self.plan.n):
            if not self.assembled[c]:
                self.assemble(c)
        return self.result


# (the expert op's rows, their input rows and per-row scalars in its order, or None) ->
# (their output rows, per-row scalars out or None), same order
DedupExpert = Callable[[ExpertRows, torch.Tensor, Optional[torch.Tensor]],
                       Tuple[torch.Tensor, Optional[torch.Tensor]]]


class DedupTokenPath(TokenPath):
    """One phase of one layer under ``a2a=dedup`` (moecomm/torch/dedup.py): the dispatch
    broadcasts rows of ``table`` (this member's tokens, ``[T, hidden]``): row r of the phase
    order copies token ``keys[r]``, with ``scalars[r]`` (or None) beside it; the experts get
    per-row scalars too (``expert(expert_rows, x, w)`` -> (y, per-row scalars out)); the
    combine sums the rows per token into a token table. ``finish()`` gives (that table, the
    scalars that came back in phase order or None). tp = esp = 1 (executor_caps refuses
    dedup's splits), so a chunk is one part."""

    def __init__(self, plan: PhasePlan, table: torch.Tensor, keys: torch.Tensor,
                 scalars: Optional[torch.Tensor], expert: DedupExpert,
                 expert_rows: Dict[Tuple[int, ...], ExpertRows], groups: ScheduleGroups,
                 schedule: object, sent: Optional[Dict[int, list]] = None) -> None:
        super().__init__(plan, table, expert, expert_rows, groups, schedule)
        self.keys, self.scalars = keys, scalars
        n = plan.n
        self.received_scalars: List[Optional[torch.Tensor]] = [None] * n
        self.out_scalars: List[Optional[torch.Tensor]] = [None] * n
        self.states: List[Optional[dedup.DedupState]] = [None] * n
        self.back_scalars: List[Optional[torch.Tensor]] = [None] * n
        self.table = table.new_zeros(table.shape)
        self.sent = sent  # op id -> rows sent per step and peer

    def kernels(self) -> Dict[object, Callable[[object], Optional[Pending]]]:
        return {R.dispatch_a2a: self.dispatch, R.expert: self.experts,
                R.combine_a2a: self.combine}

    def _steps(self, op: object, direction: str) -> Tuple[tuple, Tuple[int, ...]]:
        group = tuple(int(r) for r in self.schedule.collective(op.collective).group)
        steps = dedup.dedup_steps(group, self.groups.ranks_per_node, self.lay.me, direction)
        if steps is None:
            raise Error(f"{op.name}: a2a=dedup has no node blocks on this layout")
        return steps, group

    def _record(self, op: object) -> Optional[list]:
        if self.sent is None:
            return None
        self.sent[op.id] = []
        return self.sent[op.id]

    def dispatch(self, op: object) -> Pending:
        c = self._chunk(op)
        lo, hi = self.plan.payload(c)
        steps, group = self._steps(op, "dispatch")
        scalars = self.scalars[lo:hi] if self.scalars is not None else None
        pending = dedup.dedup_dispatch(self.rows, self.keys[lo:hi], scalars,
                                       self.plan.dispatch_matrix(c), self.lay.me, steps, group,
                                       self.groups.get(group), self._record(op))

        def finish() -> torch.Tensor:
            got = pending.wait()
            self.received[c], self.received_scalars[c] = got.rows, got.scalars
            self.states[c] = got.state
            return got.rows
        return Pending(None, finish)

    def experts(self, op: object) -> None:
        chunks = tuple(range(self.plan.n)) if op.chunk < 0 else (op.chunk,)
        rows = self.expert_rows[chunks]
        join = lambda got: got[0] if len(got) == 1 else torch.cat(got)
        x = self._take(join([self.received[c] for c in chunks]), rows.gather)
        w = None
        if self.received_scalars[chunks[0]] is not None:
            w = self._take(join([self.received_scalars[c] for c in chunks]), rows.gather)
        y, s = self.expert_fn(rows, x, w)
        for c in chunks:
            whole = len(chunks) == 1 and rows.gather is None
            self.out[c] = y if whole else y.index_select(0, rows.back[c])
            if s is not None:
                self.out_scalars[c] = s if whole else s.index_select(0, rows.back[c])

    def combine(self, op: object) -> Pending:
        c = self._chunk(op)
        steps, group = self._steps(op, "combine")
        pending = dedup.dedup_combine(self.out[c], self.out_scalars[c], self.states[c],
                                      self.plan.combine_matrix(c), self.lay.me, steps, group,
                                      self.groups.get(group), self.table, self._record(op))
        return self._store(pending, self.back_scalars, c)

    def finish(self) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
        if any(s is None for s in self.back_scalars):
            return self.table, None
        return self.table, torch.cat(self.back_scalars) if self.back_scalars else None
