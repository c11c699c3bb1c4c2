"""``a2a=dedup`` (DeepEP's normal kernels) in moecomm.torch: the routing plan of
sched/a2a_routing.h (``_moecomm.a2a_routing("dedup", ...)``, the one the simulator prices and
the MPI runtime runs), its rows deduplicated by token.

The dispatch direction is a broadcast. Source a holds its rows in the plain A2A-v send layout
(blocks by destination member, one row per (token, expert) slot) as the tokens they copy:
a token table ``[T, hidden]`` and each row's token id (``keys``). A pair block (s, d) carries
s's rows for d once per token, with each row's index into those unique rows (and the row's
per-row scalars: the forward's gate weights). A node block (a, c) carries the union of the pair
blocks it stands for (``A2ARouting.node_block_pairs``), each token once, with, per pair, which
of its unique rows the pair's unique rows are and each row's index among those: the
counterpart c keeps its own pair and forwards the others as the plan's next step says. The
final receiver expands the rows: the result is the plain A2A-v's, bitwise (only copies).

The combine direction is a reduce, the same messages backwards: expert member b sums its rows
for source a per token (a pair block of a's unique rows for b), the counterpart sums the pair
blocks of its node per token of the node block, and a adds what it gets into its token table.
Per-row scalars (the backward's gate-weight gradients) travel unreduced beside their pair
blocks and come back in a's send-row order. Every size of the combine is known from the
dispatch of the same chunk (``DedupState``), so it exchanges no counts.

The dedup messages' sizes depend on the data: the distinct tokens are found on the rows'
device by a sort (``_Unique``: no host sync), then each dispatch step exchanges the unique-row
counts of its messages (one small int64 A2A, read on the host with this member's own counts:
the one host sync a step adds), then moves the rows, the indices (int64, on the rows'
device) and the scalars, each an ``all_to_all_single`` over the group, as
``collectives.routed_all_to_all`` does (gloo's point-to-point sends and list all_to_all take
no CUDA tensors). A dedup A2A runs its steps when it is issued (the count exchange waits
anyway); its Pending is then finished.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

import torch
import torch.distributed as dist

from .. import Error, _moecomm
from .collectives import Pending, all_to_all_v

Pair = Tuple[int, int]


@dataclass(frozen=True)
class Item:
    """One block of a message: a pair block (``node`` None) or a node block ``node`` = (from,
    to) standing for ``pairs``."""
    pairs: Tuple[Pair, ...]
    node: Optional[Pair] = None


Message = Tuple[Item, ...]
Step = Tuple[Dict[int, Message], Dict[int, Message]]  # (sends, recvs) by peer member


@functools.lru_cache(maxsize=None)
def dedup_steps(group: Tuple[int, ...], ranks_per_node: int, member: int,
                direction: str) -> Optional[Tuple[Step, ...]]:
    """The dedup plan's steps as ``member`` runs them in ``direction`` (dispatch or combine):
    per step, the items it sends to and receives from each peer; None where the plan is not
    hierarchical (one node, or unequal nodes: it runs flat, as in every executor)."""
    routing = _moecomm.a2a_routing("dedup", list(group), ranks_per_node, direction)
    if routing.algorithm != "dedup":
        return None

    def messages(pair_msgs, node_msgs) -> Dict[int, Message]:
        out: Dict[int, List[Item]] = {}
        for peer, blocks in pair_msgs:
            out.setdefault(int(peer), []).extend(Item(((int(s), int(d)),)) for s, d in blocks)
        for peer, blocks in node_msgs:
            for f, t in blocks:
                pairs = tuple((int(s), int(d)) for s, d in routing.node_block_pairs(f, t))
                out.setdefault(int(peer), []).append(Item(pairs, (int(f), int(t))))
        return {p: tuple(items) for p, items in out.items()}

    return tuple((messages(s.sends, s.node_sends), messages(s.recvs, s.node_recvs))
                 for s in routing.member_steps(member))


@dataclass
class DedupState:
    """What one chunk's dispatch left on a member for its combine: ``own`` its rows' keys for
    itself; ``final[s]`` = (index of each row of pair (s, me) into its unique rows, their
    number); ``node_in[a]`` = (unique rows of the node block a sent here, {x: which of them
    pair (a, x)'s unique rows are}); ``node_out[t]`` = (token ids of the node block sent to
    t, in its rows' order)."""
    own: torch.Tensor
    final: Dict[int, Tuple[torch.Tensor, int]] = field(default_factory=dict)
    node_in: Dict[int, Tuple[int, Dict[int, torch.Tensor]]] = field(default_factory=dict)
    node_out: Dict[int, torch.Tensor] = field(default_factory=dict)


@dataclass
class DedupResult:
    """A dispatch's rows (source-major, as the plain A2A-v's), their scalars, and the state
    its combine needs."""
    rows: torch.Tensor
    scalars: Optional[torch.Tensor]
    state: DedupState


def _cat(parts: Sequence[torch.Tensor], like: torch.Tensor) -> torch.Tensor:
    return torch.cat(list(parts)) if parts else like[:0]


class _Wire:
    """One step's messages to and from every peer, exchanged as A2As over the group with the
    peers in its rank order."""

    def __init__(self, by_rank: Sequence[int], group: Optional[dist.ProcessGroup]) -> None:
        self.by_rank, self.group = by_rank, group

    def exchange(self, parts: Dict[int, List[torch.Tensor]], recv_sizes: Dict[int, int],
                 like: torch.Tensor) -> Pending:
        """Peer p gets ``cat(parts[p])``; returns what each peer sent, by peer (its size
        ``recv_sizes[p]``), as a Pending of a dict."""
        send = [_cat(parts.get(p, []), like) for p in self.by_rank]
        sizes = [int(recv_sizes.get(p, 0)) for p in self.by_rank]
        pending = all_to_all_v(_cat(send, like), [t.shape[0] for t in send], sizes, self.group)

        def split() -> Dict[int, torch.Tensor]:
            return dict(zip(self.by_rank, torch.split(pending.wait(), sizes)))
        return Pending(pending, split)


class _Unique:
    """The distinct values of ``keys`` (int64) without a host sync: ``inverse`` (each
    element's index among them, in increasing order of value) and ``count`` (a device
    scalar) now, ``values(count)`` once the count is read."""

    def __init__(self, keys: torch.Tensor) -> None:
        self._sorted, order = torch.sort(keys, stable=True)
        first = torch.ones_like(self._sorted, dtype=torch.bool)
        first[1:] = self._sorted[1:] != self._sorted[:-1]
        self._position = torch.cumsum(first, 0) - 1  # of each sorted element
        self.inverse = torch.empty_like(self._position).scatter_(0, order, self._position)
        self.count = first.sum()

    def values(self, count: int) -> torch.Tensor:
        # Elements of one value write the same value at its place.
        return self._sorted.new_empty(count).scatter_(0, self._position, self._sorted)


def _rows_of(matrix: Sequence[Sequence[int]], pair: Pair) -> int:
    return int(matrix[pair[0]][pair[1]])


def dedup_dispatch(table: torch.Tensor, keys: torch.Tensor, scalars: Optional[torch.Tensor],
                   matrix: Sequence[Sequence[int]], me: int, steps: Tuple[Step, ...],
                   group: Sequence[int], process_group: Optional[dist.ProcessGroup],
                   sent: Optional[List[Dict[int, int]]] = None) -> Pending:
    """The dispatch (broadcast) of one A2A: ``matrix[i][j]`` rows member i sends member j,
    this member's rows being ``table[keys]`` (blocks by destination) with ``scalars`` per row
    (or None). Returns a Pending of a :class:`DedupResult`; ``sent`` gets, per step, the rows
    this member sent each peer (unique rows: what crossed)."""
    n = len(matrix)
    mine = [int(matrix[me][j]) for j in range(n)]
    key_blocks = dict(enumerate(torch.split(keys, mine)))
    scal_blocks = dict(enumerate(torch.split(scalars, mine))) if scalars is not None else None
    state = DedupState(key_blocks[me])
    if not any(int(c) for row in matrix for c in row):
        empty = table[:0]
        return Pending(None, lambda: DedupResult(empty, None if scalars is None else scalars[:0],
                                                 state))
    final_rows = {me: table.index_select(0, key_blocks[me])}
    final_scal = {me: scal_blocks[me]} if scal_blocks is not None else None
    held: Dict[Pair, Tuple[torch.Tensor, torch.Tensor, Optional[torch.Tensor]]] = {}
    wire = _Wire(sorted(range(n), key=lambda m: int(group[m])), process_group)
    index_like = keys[:0]

    def prepare(item: Item, peer: int):
        """(its counts as a device tensor, a function of them on the host giving (rows,
        ints, scalars)) of one item this member sends: no host sync."""
        if item.node is None:
            (pair,) = item.pairs
            if pair not in held:
                raise Error(f"a2a=dedup: member {me} forwards block {pair} it does not hold")
            u, inv, sc = held.pop(pair)
            count = torch.full((1,), u.shape[0], dtype=torch.int64, device=keys.device)
            return count, lambda _: (u, [inv], [sc])
        if item.node[0] != me or any(s != me for s, _ in item.pairs):
            raise Error(f"a2a=dedup: member {me} sends node block {item.node} of another source")
        dests = [d for _, d in item.pairs]
        node = _Unique(_cat([key_blocks[d] for d in dests], index_like))
        pairs = [_Unique(part) for part in torch.split(node.inverse, [mine[d] for d in dests])]

        def finish(counts: List[int]):
            ukeys = node.values(counts[0])
            state.node_out[peer] = ukeys
            ints = [x for q, u in zip(pairs, counts[1:]) for x in (q.values(u), q.inverse)]
            scal = [scal_blocks[d] if scal_blocks is not None else None for d in dests]
            return table.index_select(0, ukeys), ints, scal
        return torch.stack([node.count] + [q.count for q in pairs]), finish

    def run(index: int) -> None:
        sends, recvs = steps[index]
        prepared = {p: [prepare(item, p) for item in items] for p, items in sends.items()}
        # The sizes of the dedup messages depend on the tokens: exchange them first, and
        # read what this member sends and receives on the host at once (the step's sync).
        mine_counts = {p: torch.cat([c for c, _ in ps]) for p, ps in prepared.items()}
        count_sizes = {p: sum(1 if it.node is None else 1 + len(it.pairs) for it in items)
                       for p, items in recvs.items()}
        got = wire.exchange({p: [t] for p, t in mine_counts.items()}, count_sizes,
                            index_like).wait()
        sent_peers, recv_peers = sorted(mine_counts), sorted(got)
        host = _cat([mine_counts[p] for p in sent_peers] + [got[p] for p in recv_peers],
                    index_like).tolist()
        at, own_counts, got_counts = 0, {}, {}
        for p in sent_peers:
            own_counts[p] = host[at:at + mine_counts[p].numel()]
            at += mine_counts[p].numel()
        for p in recv_peers:
            got_counts[p] = host[at:at + got[p].numel()]
            at += got[p].numel()
        built = {}
        for p, ps in prepared.items():
            counts, at, items = own_counts[p], 0, []
            for (c, finish), item in zip(ps, sends[p]):
                width = 1 if item.node is None else 1 + len(item.pairs)
                items.append(finish(counts[at:at + width]))
                at += width
            built[p] = items
        if sent is not None:
            sent.append({p: sum(b[0].shape[0] for b in bs) for p, bs in built.items()})
        # Per received item: (its unique rows, per pair (its unique rows, its rows)).
        layout: Dict[int, List[Tuple[Item, int, List[Tuple[int, int]]]]] = {}
        for p, items in recvs.items():
            counts, at, shapes = got_counts.get(p, []), 0, []
            for it in items:
                extra = 0 if it.node is None else 1
                pairs = [(counts[at + extra * (1 + k)], _rows_of(matrix, pr))
                         for k, pr in enumerate(it.pairs)]
                shapes.append((it, counts[at], pairs))
                at += 1 + extra * len(it.pairs)
            layout[p] = shapes

        def int_sizes(shape) -> List[int]:  # a pair block: row indices; a node block, per
            it, _, pairs = shape             # pair: its unique rows, then row indices
            return [r for _, r in pairs] if it.node is None else [x for ur in pairs for x in ur]

        rows = wire.exchange({p: [b[0] for b in bs] for p, bs in built.items()},
                             {p: sum(s[1] for s in sh) for p, sh in layout.items()}, table)
        ints = wire.exchange({p: [i for b in bs for i in b[1]] for p, bs in built.items()},
                             {p: sum(sum(int_sizes(s)) for s in sh) for p, sh in layout.items()},
                             index_like)
        scal = None
        if scalars is not None:
            scal = wire.exchange({p: [x for b in bs for x in b[2]] for p, bs in built.items()},
                                 {p: sum(r for s in sh for _, r in s[2])
                                  for p, sh in layout.items()}, scalars)
        rows, ints = rows.wait(), ints.wait()
        scal = scal.wait() if scal is not None else None
        for p, shapes in layout.items():
            r_parts = torch.split(rows[p], [s[1] for s in shapes])
            i_parts = list(torch.split(ints[p], [x for s in shapes for x in int_sizes(s)]))
            s_parts = list(torch.split(scal[p], [r for s in shapes for _, r in s[2]])) \
                if scal is not None else None
            i_parts.reverse()
            if s_parts is not None:
                s_parts.reverse()
            for (it, u, pairs), unique in zip(shapes, r_parts):
                for pair in it.pairs:
                    sc = s_parts.pop() if s_parts is not None else None
                    if it.node is None:
                        _place(pair, unique, i_parts.pop(), u, sc)
                    else:
                        uniq, inv = i_parts.pop(), i_parts.pop()
                        state.node_in.setdefault(pair[0], (u, {}))[1][pair[1]] = uniq
                        _place(pair, unique.index_select(0, uniq), inv, uniq.numel(), sc)

    def _place(pair: Pair, unique: torch.Tensor, inv: torch.Tensor, u: int,
               sc: Optional[torch.Tensor]) -> None:
        s, d = pair
        if d != me:  # forwarded in a later step
            held[pair] = (unique, inv, sc)
            return
        state.final[s] = (inv, u)
        final_rows[s] = unique.index_select(0, inv)
        if final_scal is not None:
            final_scal[s] = sc

    def finish() -> DedupResult:
        for index in range(len(steps)):
            run(index)
        missing = [i for i in range(n) if i not in final_rows]
        if missing or held:
            raise Error(f"a2a=dedup: member {me} got no rows from members {missing} "
                        f"or kept blocks {sorted(held)}")
        out = torch.cat([final_rows[i] for i in range(n)])
        sc = torch.cat([final_scal[i] for i in range(n)]) if final_scal is not None else None
        return DedupResult(out, sc, state)

    result = finish()
    return Pending(None, lambda: result)


def dedup_combine(rows: torch.Tensor, scalars: Optional[torch.Tensor], state: DedupState,
                  matrix: Sequence[Sequence[int]], me: int, steps: Tuple[Step, ...],
                  group: Sequence[int], process_group: Optional[dist.ProcessGroup],
                  into: torch.Tensor, sent: Optional[List[Dict[int, int]]] = None) -> Pending:
    """The combine (reduce) of one A2A, the reverse of the dispatch that left ``state``:
    ``matrix[b][a]`` rows member b returns member a (the dispatch's transpose), this member's
    ``rows`` by destination, each destination's in its send-row order, with ``scalars`` per row
    (or None). What comes back is added into ``into`` (this member's token table) by token;
    returns a Pending of the scalars of this member's rows, in its send-row order (None
    without scalars). ``sent``: as ``dedup_dispatch``'s."""
    n = len(matrix)
    mine = [int(matrix[me][a]) for a in range(n)]
    blocks = dict(enumerate(torch.split(rows, mine)))
    scal_blocks = dict(enumerate(torch.split(scalars, mine))) if scalars is not None else None
    if not any(int(c) for row in matrix for c in row):
        return Pending(None, lambda: None if scalars is None else scalars[:0])
    if blocks[me].shape[0]:
        into.index_add_(0, state.own, blocks[me])
    back = {me: scal_blocks[me]} if scal_blocks is not None else None
    held: Dict[Pair, Tuple[torch.Tensor, Optional[torch.Tensor]]] = {}
    width = rows.shape[1:]
    for a in range(n):  # each destination's rows summed per token: its unique rows for me
        if a != me:
            inv, u = state.final[a]
            held[(me, a)] = (rows.new_zeros((u, *width)).index_add_(0, inv, blocks[a]),
                             scal_blocks[a] if scal_blocks is not None else None)
    wire = _Wire(sorted(range(n), key=lambda m: int(group[m])), process_group)

    def build(item: Item) -> Tuple[torch.Tensor, List[Optional[torch.Tensor]]]:
        if item.node is None:
            (pair,) = item.pairs
            if pair not in held:
                raise Error(f"a2a=dedup: member {me} returns block {pair} it does not hold")
            s, sc = held.pop(pair)
            return s, [sc]
        f, a = item.node
        if f != me or a not in state.node_in:
            raise Error(f"a2a=dedup: member {me} returns node block {item.node} it did not get")
        u, uniq = state.node_in[a]
        out, scal = rows.new_zeros((u, *width)), []
        for x, dst in item.pairs:  # the node's pairs for a, summed per token of the node block
            s, sc = held.pop((x, dst))
            out.index_add_(0, uniq[x], s)
            scal.append(sc)
        return out, scal

    def recv_shape(item: Item) -> Tuple[int, List[int]]:
        """(unique rows, per pair its rows) of an item this member receives."""
        scal = [_rows_of(matrix, pr) for pr in item.pairs]
        if item.node is None:
            (b, a), = item.pairs
            return state.node_in[a][1][b].numel(), scal  # forwarded by this member
        return state.node_out[item.node[0]].numel(), scal

    def run(index: int) -> None:
        sends, recvs = steps[index]
        built = {p: [build(item) for item in items] for p, items in sends.items()}
        if sent is not None:
            sent.append({p: sum(b[0].shape[0] for b in bs) for p, bs in built.items()})
        shapes = {p: [recv_shape(item) for item in items] for p, items in recvs.items()}
        got = wire.exchange({p: [b[0] for b in bs] for p, bs in built.items()},
                            {p: sum(s[0] for s in sh) for p, sh in shapes.items()}, rows)
        scal = None
        if scalars is not None:
            scal = wire.exchange({p: [x for b in bs for x in b[1]] for p, bs in built.items()},
                                 {p: sum(sum(s[1]) for s in sh) for p, sh in shapes.items()},
                                 scalars)
        got = got.wait()
        scal = scal.wait() if scal is not None else None
        for p, items in recvs.items():
            parts = torch.split(got[p], [s[0] for s in shapes[p]])
            s_parts = list(torch.split(scal[p], [r for s in shapes[p] for r in s[1]])) \
                if scal is not None else None
            if s_parts is not None:
                s_parts.reverse()
            for item, part in zip(items, parts):
                if item.node is None:
                    held[item.pairs[0]] = (part, s_parts.pop() if s_parts is not None else None)
                    continue
                if part.shape[0]:
                    into.index_add_(0, state.node_out[item.node[0]], part)
                for x, a in item.pairs:
                    if a != me:
                        raise Error(f"a2a=dedup: member {me} got node block {item.node} for {a}")
                    sc = s_parts.pop() if s_parts is not None else None
                    if back is not None:
                        back[x] = sc

    def finish() -> Optional[torch.Tensor]:
        for index in range(len(steps)):
            run(index)
        if held:
            raise Error(f"a2a=dedup: member {me} kept blocks {sorted(held)}")
        if back is None:
            return None
        return torch.cat([back[x] for x in range(n)])

    result = finish()
    return Pending(None, lambda: result)
