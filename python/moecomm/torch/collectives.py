"""Backend-neutral collectives for the torch executor.

Every collective here returns a :class:`Pending`: issued asynchronously where the backend
allows, finished by :meth:`Pending.wait`, which returns the received tensor. The forms that
work on every backend (gloo on CPU, NCCL on GPUs) are used unless a faster one exists on the
backend in use; the faster ones are marked "NCCL only" and are not run by the CPU tests:

- A2A-v: ``all_to_all_single`` with uneven splits (every backend).
- AllGather-v: list ``all_gather`` of blocks padded to the largest (every backend).
- ReduceScatter-v: ``reduce_scatter`` of padded blocks on NCCL (NCCL only); elsewhere an A2A of
  the blocks and a sum, which moves the same bytes as a direct ReduceScatter.
- Routed A2A (1DH, 2DH, pairwise, any algorithm whose plan is not one direct step): the
  steps of its routing plan (sched/a2a_routing.h, through ``_moecomm.a2a_routing``), each an
  A2A-v over the collective's group carrying that step's messages, the same messages the MPI
  runtime sends and the simulator prices.

A collective whose every block is empty (a chunk no member has rows in: few tokens, skewed
routing, an empty batch) moves nothing: gloo's AllGather of empty blocks dies (SIGFPE), so
such a collective is not issued. Every member knows every count, so all of them skip it
together, and its :class:`Pending` gives an empty tensor of the rows' trailing shape.
"""
from __future__ import annotations

import functools
from typing import Callable, Dict, Optional, Sequence, Tuple

import torch
import torch.distributed as dist

from .. import Error, _moecomm


# The attribute a backend's exception (gloo's timeout or closed connection, NCCL's error)
# gets when a collective here fails, issued or waited for: the process group it ran on (None:
# the default group). The runner turns such an exception into a moecomm.Error naming the op.
FAILED_GROUP = "moecomm_group"


def tag_failure(error: BaseException, group: Optional[dist.ProcessGroup]) -> None:
    """Marks ``error`` as ``group``'s collective failing (the innermost collective's group
    stays: a routed A2A's step fails inside the A2A's wait)."""
    if not hasattr(error, FAILED_GROUP):
        setattr(error, FAILED_GROUP, group)


def _issue(call: Callable, *args, group: Optional[dist.ProcessGroup], **kwargs) -> object:
    """``call(*args, group=group, async_op=True)``: a backend's collective, its failure
    tagged with ``group``."""
    try:
        return call(*args, group=group, async_op=True, **kwargs)
    except RuntimeError as e:
        tag_failure(e, group)
        raise


class Pending:
    """A collective in flight: ``wait()`` finishes it and returns what it received.
    ``work``: the backend's (run on ``group``: its failure is tagged so), another Pending,
    or None."""

    def __init__(self, work: Optional[object], finish: Callable[[], torch.Tensor],
                 group: Optional[dist.ProcessGroup] = None) -> None:
        self._work = work
        self._finish = finish
        self._group = group
        self._result: Optional[torch.Tensor] = None
        self._done = False

    def wait(self) -> torch.Tensor:
        if not self._done:
            if isinstance(self._work, Pending):
                self._work.wait()  # tags its own collective's failure
            elif self._work is not None:
                try:
                    self._work.wait()
                except RuntimeError as e:
                    tag_failure(e, self._group)
                    raise
            self._result = self._finish()
            self._done = True
        return self._result


def done(value: torch.Tensor) -> Pending:
    """A collective that needed no communication (a group of one)."""
    return Pending(None, lambda: value)


def nothing(like: torch.Tensor) -> Pending:
    """A collective whose every block is empty: no rows of ``like``'s trailing shape."""
    return done(like.new_empty((0, *like.shape[1:])))


def backend_of(group: Optional[dist.ProcessGroup]) -> str:
    return str(dist.get_backend(group)).lower()


def all_to_all_v(rows: torch.Tensor, send_counts: Sequence[int], recv_counts: Sequence[int],
                 group: Optional[dist.ProcessGroup]) -> Pending:
    """A2A-v of rows: block j (``send_counts[j]`` rows) goes to member j; returns the blocks
    received, source-major (``recv_counts[i]`` rows from member i). A member's counts show
    only its own blocks: callers that know every member's (``a2a_by_algorithm``,
    ``routed_all_to_all``, ``reduce_scatter_v``) skip an A2A-v that moves nothing. One in which
    only some members have nothing to send or receive is issued: every member joins it (gloo
    takes empty blocks here, unlike in its AllGather)."""
    cols = rows.shape[1:]
    out = rows.new_empty((int(sum(recv_counts)), *cols))
    if dist.get_world_size(group) == 1:
        return done(rows.clone())
    work = _issue(dist.all_to_all_single, out, rows.contiguous(),
                  [int(c) for c in recv_counts], [int(c) for c in send_counts], group=group)
    return Pending(work, lambda: out, group)


def _pad(block: torch.Tensor, rows: int) -> torch.Tensor:
    if block.shape[0] == rows:
        return block.contiguous()
    pad = block.new_zeros((rows - block.shape[0], *block.shape[1:]))
    return torch.cat([block, pad])


def all_gather_v(block: torch.Tensor, counts: Sequence[int],
                 group: Optional[dist.ProcessGroup]) -> Pending:
    """AllGather-v: member i contributes ``counts[i]`` rows; returns them member-major."""
    if dist.get_world_size(group) == 1:
        return done(block.clone())
    most = max(int(c) for c in counts)
    if most == 0:
        return nothing(block)
    outs = [block.new_empty((most, *block.shape[1:])) for _ in counts]
    work = _issue(dist.all_gather, outs, _pad(block, most), group=group)
    return Pending(work, lambda: torch.cat([o[:int(c)] for o, c in zip(outs, counts)]), group)


def reduce_scatter_v(rows: torch.Tensor, counts: Sequence[int],
                     group: Optional[dist.ProcessGroup]) -> Pending:
    """ReduceScatter-v (sum): ``rows`` holds member j's block of ``counts[j]`` rows at its
    offset; returns this member's block summed over the members."""
    n = dist.get_world_size(group)
    if n == 1:
        return done(rows.clone())
    if not any(int(c) for c in counts):
        return nothing(rows)
    me = dist.get_rank(group)
    if backend_of(group) == "nccl":  # NCCL only: a direct ReduceScatter of padded blocks
        most = max(int(c) for c in counts)
        blocks = [_pad(b, most) for b in torch.split(rows, [int(c) for c in counts])]
        out = rows.new_empty((most, *rows.shape[1:]))
        work = _issue(dist.reduce_scatter, out, blocks, group=group)
        return Pending(work, lambda: out[:int(counts[me])], group)
    # Elsewhere: every member sends block j to member j, which sums what it received.
    mine = int(counts[me])
    pending = all_to_all_v(rows, counts, [mine] * n, group)
    return Pending(pending, lambda: pending.wait().reshape(n, mine, *rows.shape[1:]).sum(0))


def all_reduce(t: torch.Tensor, group: Optional[dist.ProcessGroup]) -> Pending:
    """Sum in place over the group (every member's ``t`` has the same shape: an empty one is
    empty on all of them, and all skip it)."""
    if dist.get_world_size(group) == 1 or t.numel() == 0:
        return done(t)
    work = _issue(dist.all_reduce, t, group=group)
    return Pending(work, lambda: t, group)


Key = Tuple[int, int]  # a block of an A2A: (source member, destination member)


@functools.lru_cache(maxsize=None)
def member_routing(algorithm: str, group: Tuple[int, ...], ranks_per_node: int, member: int
                   ) -> Tuple[bool, list]:
    """The A2A's routing plan (sched/a2a_routing.h, the one the simulator prices and the MPI
    runtime runs) as ``member`` runs it: whether it is one direct step (a plain A2A-v) and,
    per step, the blocks ((source, destination) members) it sends to and receives from each
    member, as dicts. Computed once per layout."""
    routing = _moecomm.a2a_routing(algorithm, list(group), ranks_per_node)
    if routing.algorithm == "dedup":  # node blocks: the rows' tokens decide what travels
        raise Error("a2a=dedup moves rows deduplicated by token, which a routed A2A of whole "
                    "blocks cannot: moecomm.torch runs it in MoELayer (moecomm/torch/dedup.py)")
    blocks = lambda messages: {int(m): [tuple(int(x) for x in k) for k in keys]
                               for m, keys in messages}
    return routing.direct, [(blocks(s.sends), blocks(s.recvs))
                            for s in routing.member_steps(member)]


def routed_all_to_all(rows: torch.Tensor, counts: Sequence[Sequence[int]], me: int,
                      steps: list, group: Sequence[int],
                      process_group: Optional[dist.ProcessGroup]) -> Pending:
    """A2A-v as a routing plan's steps say. ``counts[i][j]``: rows member i sends member j
    (every member knows the whole matrix, so both ends of every message know its size);
    ``rows``: this member's blocks by destination; ``steps``: ``member_routing``'s;
    ``group``: the members' world ranks. Each step is one ``all_to_all_single`` over the
    group carrying that step's messages (zero rows to the members this one does not message
    in it): it runs on every backend (gloo's point-to-point sends take no CUDA tensors) and
    every member joins every step. Returns the rows received, source-major. The steps run
    one after another: only the first is in flight when this returns; ``wait()`` runs the
    rest. A matrix of zeros moves nothing and runs no step."""
    n = len(counts)
    if not any(int(c) for row in counts for c in row):
        return nothing(rows)
    blocks: Dict[Key, torch.Tensor] = dict(
        zip([(me, j) for j in range(n)], torch.split(rows, [int(counts[me][j]) for j in range(n)])))
    # The process group ranks its members by world rank: member order may differ.
    by_rank = sorted(range(n), key=lambda m: int(group[m]))
    rows_of = lambda keys: sum(int(counts[s][d]) for s, d in keys)

    def run(index: int) -> Pending:
        sends, recvs = steps[index]
        out = [blocks.pop(k) for m in by_rank for k in sends.get(m, [])]
        payload = torch.cat(out) if out else rows[:0]
        got = all_to_all_v(payload, [rows_of(sends.get(m, [])) for m in by_rank],
                           [rows_of(recvs.get(m, [])) for m in by_rank], process_group)

        def finish() -> torch.Tensor:
            keys = [k for m in by_rank for k in recvs.get(m, [])]
            received = got.wait()
            blocks.update(zip(keys, torch.split(received, [int(counts[s][d]) for s, d in keys])))
            return received

        return Pending(None, finish)

    first = run(0) if steps else done(rows[:0])

    def rest() -> torch.Tensor:
        first.wait()
        for index in range(1, len(steps)):
            run(index).wait()
        return torch.cat([blocks[(i, me)] for i in range(n)])

    return Pending(None, rest)


def a2a_by_algorithm(payload: torch.Tensor, matrix: Sequence[Sequence[int]], me: int,
                     collective: object, groups: object) -> Pending:
    """A schedule collective's A2A-v of ``payload``: ``matrix[i][j]`` rows from member i to
    member j, routed as its algorithm's plan says (``groups``: ScheduleGroups). A plan of one
    direct step is the backend's own A2A-v; any other runs step by step."""
    group = tuple(int(r) for r in collective.group)
    direct, steps = member_routing(collective.algorithm, group, groups.ranks_per_node, me)
    n = len(matrix)
    if not any(int(c) for row in matrix for c in row):
        return nothing(payload)
    if direct:
        return all_to_all_v(payload, [matrix[me][j] for j in range(n)],
                            [matrix[i][me] for i in range(n)], groups.get(group))
    return routed_all_to_all(payload, matrix, me, steps, group, groups.get(group))
