"""a2a=dedup on 4 gloo processes over two nodes (2 x 2): what the dedup A2As send, and the
dedup wire against the plain A2A-v it stands for.

``run_counts``: MoELayer (base=baseline,a2a=dedup: one chunk) forward and backward; per rank,
the rows its dispatches sent each member in their first step (its own tokens), the rows its
combines sent in their last step (the crossing), and the brute-force counts from the
routing: per on-node member, the distinct tokens with a slot there; per other node, the
distinct tokens with a slot on it.

``run_wire``: dedup_dispatch and dedup_combine on random rows with repeated keys, over a
group whose member order is not its rank order, beside the plain A2A-v (the dispatch's rows
and scalars bitwise, the combine's per-token sums, its scalars bitwise)."""
from __future__ import annotations

import torch
import torch.distributed as dist

from torch_spawn import guarded, run_on_ranks

HIDDEN, FFN, EXPERTS, TOKENS = 16, 32, 8, 24
RANKS_PER_NODE = 2
TWO_NODES = {"name": "2x2", "levels": [
    {"name": "node", "count": 2, "bandwidth_GBps": 1, "latency_us": 20},
    {"name": "gpu", "count": 2, "bandwidth_GBps": 10, "latency_us": 5}],
    "device": {"tflops": 1, "memory_GB": 16, "memory_bandwidth_GBps": 50}}
# (case, strategy, gate, capacity_factor)
COUNT_CASES = [("gshard", "base=baseline,a2a=dedup", "gshard", None),
               ("expert-choice", "base=baseline,a2a=dedup", "expert-choice", 1.0)]


def run_counts(rank, case):
    import moecomm.torch as mt
    from moecomm.torch import routing as rt
    _, strategy, gate, cf = case
    layer = mt.MoELayer(HIDDEN, FFN, EXPERTS, 2, gate=gate, capacity_factor=cf,
                        strategy=strategy, parallel="ep=4", cluster=TWO_NODES, tokens=TOKENS,
                        seed=3)
    assert layer.dedup
    gen = torch.Generator().manual_seed(100 + rank)
    x = torch.randn(TOKENS, HIDDEN, generator=gen).requires_grad_()
    layer(x).sum().backward()
    ops = {o.id: o for o in layer.schedule.ops(rank) if o.layer == 0}
    sent = {}
    for op_id, steps in layer.last_rows_sent.items():
        op = ops[op_id]
        sent[f"{op.phase}.{op.name}"] = [{str(k): v for k, v in s.items()} for s in steps]
    # The brute force: every kept slot (token, expert) of the routing.
    with torch.no_grad():
        token, expert, _ = rt.choose(layer.gate, x, layer.gate_weight, 2, cf, EXPERTS,
                                     layer.expert_embeddings, layer.temperature)
    cap = rt.capacity_of(layer.gate, cf, TOKENS, 2, EXPERTS)
    slots = list(zip(token.tolist(), expert.tolist()))
    if cap is not None:  # each expert's first C slots in slot order
        seen, kept = {}, []
        for t, e in slots:
            seen[e] = seen.get(e, 0) + 1
            if seen[e] <= cap:
                kept.append((t, e))
        slots = kept
    group = [int(r) for r in layer.ep_group]
    node = lambda m: group[m] // RANKS_PER_NODE
    me = layer.member
    want, plain = {}, {}
    for t, e in slots:
        m = e // layer.local
        if m == me:
            continue
        local = lambda p: [q for q in range(len(group)) if node(q) == node(p)].index(p)
        peer = m if node(m) == node(me) else next(  # the counterpart on m's node
            p for p in range(len(group)) if node(p) == node(m) and local(p) == local(me))
        want.setdefault(str(peer), set()).add(t if node(m) == node(me) else (t, node(m)))
        plain[str(peer)] = plain.get(str(peer), 0) + 1
    return {"sent": sent, "want": {k: len(v) for k, v in want.items()}, "plain": plain,
            "member": me, "on_node": [str(p) for p in range(len(group))
                                      if p != me and node(p) == node(me)]}


def run_wire(rank):
    from moecomm.torch import dedup
    group = (0, 2, 1, 3)  # member m is rank group[m]: members 0, 1 on node 0
    me = group.index(rank)
    n, width, tokens = len(group), 5, 7
    gen = torch.Generator().manual_seed(5)
    matrix = torch.randint(0, 9, (n, n), generator=gen).tolist()
    matrix[2][1] = 0  # an empty pair block
    keys = {i: torch.randint(0, tokens, (sum(matrix[i]),), generator=gen) for i in range(n)}
    tables = {i: torch.randn(tokens, width, generator=gen) for i in range(n)}
    scalars = {i: torch.randn(sum(matrix[i]), generator=gen) for i in range(n)}
    by_rank = sorted(range(n), key=lambda m: group[m])

    def plain(rows, send, recv):  # the plain A2A-v, blocks in member order
        s = dict(zip(range(n), torch.split(rows, send)))
        out = torch.empty((sum(recv), *rows.shape[1:]), dtype=rows.dtype)
        dist.all_to_all_single(out, torch.cat([s[m] for m in by_rank]),
                               [recv[m] for m in by_rank], [send[m] for m in by_rank])
        got = dict(zip(by_rank, torch.split(out, [recv[m] for m in by_rank])))
        return torch.cat([got[m] for m in range(n)])

    send = matrix[me]
    recv = [matrix[i][me] for i in range(n)]
    want_rows = plain(tables[me][keys[me]], send, recv)
    want_scalars = plain(scalars[me], send, recv)
    steps = dedup.dedup_steps(group, RANKS_PER_NODE, me, "dispatch")
    got = dedup.dedup_dispatch(tables[me], keys[me], scalars[me], matrix, me, steps, group,
                               None).wait()
    # The experts' side: some output per row and per-row scalars back.
    out_rows = got.rows * 3 + torch.arange(got.rows.shape[0])[:, None]
    out_scalars = torch.randn(got.rows.shape[0], generator=gen)
    back_rows = plain(out_rows, recv, send)
    back_scalars = plain(out_scalars, recv, send)
    want_table = torch.zeros(tokens, width).index_add_(0, keys[me], back_rows)
    table = torch.zeros(tokens, width)
    transposed = [[matrix[j][i] for j in range(n)] for i in range(n)]
    csteps = dedup.dedup_steps(group, RANKS_PER_NODE, me, "combine")
    scal = dedup.dedup_combine(out_rows, out_scalars, got.state, transposed, me, csteps, group,
                               None, table).wait()
    scale = max(1.0, want_table.abs().max().item())
    return {"rows_equal": torch.equal(got.rows, want_rows),
            "scalars_equal": torch.equal(got.scalars, want_scalars),
            "combine_diff": (table - want_table).abs().max().item() / scale,
            "combine_scalars_equal": torch.equal(scal, back_scalars),
            "rows": int(want_rows.shape[0])}


def run_rank(rank):
    out = {"wire": guarded(run_wire, rank)}
    for case in COUNT_CASES:
        out[case[0]] = guarded(run_counts, rank, case)
    return out


def run_all(outdir: str):
    return run_on_ranks(run_rank, outdir)


if __name__ == "__main__":
    import json
    import tempfile
    for r, res in enumerate(run_all(tempfile.mkdtemp())):
        print(r, json.dumps(res)[:3000])
