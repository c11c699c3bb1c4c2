"""Backend-neutral collectives for the torch executor.

Every collective here returns a :class:`Pending`: issued asynchronously where the backend
allows, finished by :meth:`Pending.wait`, which returns the received tensor. The forms that
work on every backend (gloo on CPU, NCCL on GPUs) are used unless a faster one exists on the
backend in use; the faster ones are marked "NCCL only" and are not run by the CPU tests:

- A2A-v: ``all_to_all_single`` with uneven splits (every backend).
- AllGather-v: list ``all_gather`` of blocks padded to the largest (every backend).
- ReduceScatter-v: ``reduce_scatter`` of padded blocks on NCCL (NCCL only); elsewhere an A2A of
  the blocks and a sum, which moves the same bytes as a direct ReduceScatter.
- Hierarchical A2A (1DH, 2DH): A2As over node and cross-node sub-groups, routed as the
  simulator's flows are (sim/collective_flows.h, rt/hierarchical_a2a.h).
"""
from __future__ import annotations

from typing import Callable, Dict, List, Optional, Sequence, Tuple

import torch
import torch.distributed as dist


class Pending:
    """A collective in flight: ``wait()`` finishes it and returns what it received."""

    def __init__(self, work: Optional[object], finish: Callable[[], torch.Tensor]) -> None:
        self._work = work
        self._finish = finish
        self._result: Optional[torch.Tensor] = None
        self._done = False

    def wait(self) -> torch.Tensor:
        if not self._done:
            if self._work is not None:
                self._work.wait()
            self._result = self._finish()
            self._done = True
        return self._result


def done(value: torch.Tensor) -> Pending:
    """A collective that needed no communication (a group of one)."""
    return Pending(None, lambda: value)


def backend_of(group: Optional[dist.ProcessGroup]) -> str:
    return str(dist.get_backend(group)).lower()


def all_to_all_v(rows: torch.Tensor, send_counts: Sequence[int], recv_counts: Sequence[int],
                 group: Optional[dist.ProcessGroup]) -> Pending:
    """A2A-v of rows: block j (``send_counts[j]`` rows) goes to member j; returns the blocks
    received, source-major (``recv_counts[i]`` rows from member i)."""
    cols = rows.shape[1:]
    out = rows.new_empty((int(sum(recv_counts)), *cols))
    if dist.get_world_size(group) == 1:
        return done(rows.clone())
    work = dist.all_to_all_single(out, rows.contiguous(), [int(c) for c in recv_counts],
                                  [int(c) for c in send_counts], group=group, async_op=True)
    return Pending(work, lambda: out)


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
    outs = [block.new_empty((most, *block.shape[1:])) for _ in counts]
    work = dist.all_gather(outs, _pad(block, most), group=group, async_op=True)
    return Pending(work, lambda: torch.cat([o[:int(c)] for o, c in zip(outs, counts)]))


def reduce_scatter_v(rows: torch.Tensor, counts: Sequence[int],
                     group: Optional[dist.ProcessGroup]) -> Pending:
    """ReduceScatter-v (sum): ``rows`` holds member j's block of ``counts[j]`` rows at its
    offset; returns this member's block summed over the members."""
    n = dist.get_world_size(group)
    if n == 1:
        return done(rows.clone())
    me = dist.get_rank(group)
    if backend_of(group) == "nccl":  # NCCL only: a direct ReduceScatter of padded blocks
        most = max(int(c) for c in counts)
        blocks = [_pad(b, most) for b in torch.split(rows, [int(c) for c in counts])]
        out = rows.new_empty((most, *rows.shape[1:]))
        work = dist.reduce_scatter(out, blocks, group=group, async_op=True)
        return Pending(work, lambda: out[:int(counts[me])])
    # Elsewhere: every member sends block j to member j, which sums what it received.
    mine = int(counts[me])
    pending = all_to_all_v(rows, counts, [mine] * n, group)
    return Pending(pending, lambda: pending.wait().reshape(n, mine, *rows.shape[1:]).sum(0))


def all_reduce(t: torch.Tensor, group: Optional[dist.ProcessGroup]) -> Pending:
    """Sum in place over the group."""
    if dist.get_world_size(group) == 1:
        return done(t)
    work = dist.all_reduce(t, group=group, async_op=True)
    return Pending(work, lambda: t)


Key = Tuple[int, int]  # a block of an A2A: (source member, destination member)


def _hold(n: int) -> List[List[Key]]:
    """What each member holds before a routed A2A: its blocks by destination."""
    return [[(i, j) for j in range(n)] for i in range(n)]


def _phase_plan(held: List[List[Key]], groups: List[List[int]], hop: Callable[[int, Key], int]
                ) -> Tuple[List[List[Key]], List[Dict[int, List[Key]]]]:
    """One phase of a routed A2A: inside each sub-group (members in ascending order) every
    member sends each block it holds to ``hop(member, block)``. Returns what every member
    holds afterwards (from each peer in group order, in the peer's order) and, per member,
    the blocks it sends to each peer."""
    n = len(held)
    sends: List[Dict[int, List[Key]]] = [dict() for _ in range(n)]
    after = [list(h) for h in held]
    for group in groups:
        for m in group:
            sends[m] = {p: [k for k in held[m] if hop(m, k) == p] for p in group}
        for m in group:
            after[m] = [k for p in group for k in sends[p][m]]
    return after, sends


def hierarchical_plan(algorithm: str, nodes: List[List[int]]) -> List[Tuple[str, List[List[int]],
                                                                          Callable[[int, Key], int]]]:
    """The phases of a hierarchical A2A over members grouped by node (equal node sizes), as
    (sub-group kind, sub-groups, hop) triples:

    - ``2dh`` (Tutel): inside each node, the member of local index l gathers every block its
      node sends to local index l anywhere; then members of equal local index exchange.
    - ``1dh`` (HetuMoE): on-node blocks go straight to their member and off-node ones to the
      node's first member; the first members exchange; they scatter inside their node.
    """
    node_of = {m: k for k, node in enumerate(nodes) for m in node}
    local_of = {m: node.index(m) for node in nodes for m in node}
    across = [[node[l] for node in nodes] for l in range(len(nodes[0]))]
    if algorithm == "2dh":
        return [("node", nodes, lambda m, k: nodes[node_of[m]][local_of[k[1]]]),
                ("across", across, lambda m, k: k[1])]
    if algorithm == "1dh":
        leaders = [[node[0] for node in nodes]]

        def first(m: int, k: Key) -> int:
            return k[1] if node_of[k[1]] == node_of[m] else nodes[node_of[m]][0]

        return [("node", nodes, first),
                ("leaders", leaders, lambda m, k: nodes[node_of[k[1]]][0]),
                ("node", nodes, lambda m, k: k[1])]
    raise ValueError(f"hierarchical A2A: unknown algorithm '{algorithm}' (1dh or 2dh)")


def routed_all_to_all(rows: torch.Tensor, counts: Sequence[Sequence[int]], me: int,
                      phases: List[Tuple[str, List[List[int]], Callable[[int, Key], int]]],
                      group_of: Callable[[str, int], Optional[dist.ProcessGroup]]) -> Pending:
    """A2A-v as the phases route it. ``counts[i][j]``: rows member i sends member j (every
    member knows the whole matrix, so both ends of every message know its size); ``rows``:
    this member's blocks by destination; ``group_of(kind, member)``: the sub-group of that
    kind holding the member (None: it takes no part). Returns the rows received,
    source-major. The phases run one after another: only the first is in flight when this
    returns; ``wait()`` runs the rest."""
    n = len(counts)
    held = _hold(n)
    blocks = dict(zip(held[me], torch.split(rows, [int(counts[me][j]) for j in range(n)])))
    plans = []
    for kind, groups, hop in phases:
        after, sends = _phase_plan(held, groups, hop)
        plans.append((kind, groups, held, sends))
        held = after

    def run(step: int) -> Pending:
        kind, groups, before, sends = plans[step]
        peers = next((g for g in groups if me in g), None)
        if peers is None:
            return done(rows.new_empty((0, *rows.shape[1:])))
        out_keys = [k for p in peers for k in sends[me][p]]
        in_keys = [k for p in peers for k in sends[p][me]]
        size = lambda keys: sum(int(counts[s][d]) for s, d in keys)
        payload = torch.cat([blocks.pop(k) for k in out_keys]) if out_keys else rows[:0]
        got = all_to_all_v(payload, [size(sends[me][p]) for p in peers],
                           [size(sends[p][me]) for p in peers], group_of(kind, me))

        def finish() -> torch.Tensor:
            received = got.wait()
            sizes = [int(counts[s][d]) for s, d in in_keys]
            blocks.update(zip(in_keys, torch.split(received, sizes)))
            return received

        return Pending(got, finish)

    first = run(0)

    def rest() -> torch.Tensor:
        first.wait()
        for step in range(1, len(plans)):
            run(step).wait()
        return torch.cat([blocks[(i, me)] for i in range(n)])

    return Pending(first, rest)


def a2a_by_algorithm(payload: torch.Tensor, matrix: Sequence[Sequence[int]], me: int,
                     collective: object, groups: object) -> Pending:
    """A schedule collective's A2A-v of ``payload``: ``matrix[i][j]`` rows from member i to
    member j, flat or routed as its algorithm says (1DH, 2DH; ``groups``: ScheduleGroups)."""
    if collective.algorithm in ("1dh", "2dh"):
        phases = hierarchical_plan(collective.algorithm, groups.nodes(collective.group))
        group_of = lambda kind, m: groups.routed(collective.group, kind, m)
        return routed_all_to_all(payload, matrix, me, phases, group_of)
    n = len(matrix)
    return all_to_all_v(payload, [matrix[me][j] for j in range(n)],
                        [matrix[i][me] for i in range(n)], groups.get(collective.group))
