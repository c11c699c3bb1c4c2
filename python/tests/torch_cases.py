"""Runs every torch-layer case on 4 gloo processes (torch.multiprocessing.spawn) and writes,
per rank and case, the largest differences from the reference MoE (torch_reference.py)."""
from __future__ import annotations

import sys

import torch
import torch.distributed as dist

from moecomm import _moecomm
from torch_spawn import guarded, run_on_ranks

HIDDEN, FFN, EXPERTS, TOKENS = 16, 32, 8, 24
ONE_NODE = None  # MoELayer's default: one node of 4 ranks
TWO_NODES = {"name": "2x2", "levels": [
    {"name": "node", "count": 2, "bandwidth_GBps": 1, "latency_us": 20},
    {"name": "gpu", "count": 2, "bandwidth_GBps": 10, "latency_us": 5}],
    "device": {"tflops": 1, "memory_GB": 16, "memory_bandwidth_GBps": 50}}

# (id, strategy, parallel, cluster, gate, capacity_factor, ffn_type, top_k)
CASES = [
    ("baseline", "baseline", "ep=4", ONE_NODE, "gshard", None, "gelu", 2),
    ("lina", "lina", "ep=4", ONE_NODE, "gshard", None, "gelu", 2),
    ("fsmoe", "fsmoe", "ep=4", ONE_NODE, "gshard", None, "gelu", 2),
    ("fsmoe-r3-r2", "base=fsmoe,chunks_fwd=3,chunks_bwd=2", "ep=4", ONE_NODE, "gshard", None, "gelu", 2),
    ("experts-wait", "base=baseline,chunks=3,pipeline_experts=false", "ep=4", ONE_NODE, "gshard", None, "gelu", 2),
    ("recompute", "base=fsmoe,chunks_fwd=3,chunks_bwd=2,recompute_experts=true", "ep=4", ONE_NODE, "gshard", 1.0, "swiglu", 2),
    ("hier-a2a", "hier-a2a", "ep=4", TWO_NODES, "gshard", None, "gelu", 2),
    ("2dh-chunks", "base=fsmoe,a2a=2dh,chunks=2", "ep=4", TWO_NODES, "gshard", None, "gelu", 2),
    ("1dh", "base=baseline,a2a=1dh", "ep=4", TWO_NODES, "gshard", None, "gelu", 2),
    ("tp-replicate", "baseline", "tp=2,ep=2,esp=2", TWO_NODES, "gshard", None, "gelu", 2),
    ("monta-o1", "monta-o1", "tp=2,ep=2,esp=2", TWO_NODES, "gshard", None, "gelu", 2),
    ("monta-o2", "monta-o2", "tp=2,ep=2,esp=2", TWO_NODES, "gshard", None, "gelu", 2),
    ("monta-o3", "monta-o3", "tp=2,ep=2,esp=2", TWO_NODES, "gshard", None, "gelu", 2),
    ("fsmoe-tp", "fsmoe", "tp=2,ep=2,esp=2", TWO_NODES, "gshard", None, "gelu", 2),
    ("edp-bucketed", "baseline", "ep=2", ONE_NODE, "gshard", None, "gelu", 2),
    ("edp-lina", "base=lina,grad_partitions=3", "ep=2", ONE_NODE, "gshard", None, "gelu", 2),
    ("edp-fsmoe", "base=fsmoe,grad_partitions=2", "ep=2", ONE_NODE, "gshard", None, "gelu", 2),
    ("sigmoid", "fsmoe", "ep=4", ONE_NODE, "sigmoid", None, "gelu", 1),
    ("xmoe", "fsmoe", "ep=4", ONE_NODE, "xmoe", None, "gelu", 2),
    ("expert-choice", "fsmoe", "ep=4", ONE_NODE, "expert-choice", 1.0, "gelu", 2),
    ("capacity", "fsmoe", "ep=4", ONE_NODE, "gshard", 1.0, "gelu", 2),
    ("swiglu", "monta-o3", "tp=2,ep=2,esp=2", TWO_NODES, "gshard", None, "swiglu", 2),
    ("hybridep-d2", "base=hybridep,hybrid_domain=2,compression=1", "ep=4", ONE_NODE, "gshard", None, "gelu", 2),
    ("hybridep-2x1", "base=hybridep,hybrid_levels=2x1,compression=1,chunks=2", "ep=4", TWO_NODES, "gshard", None, "gelu", 2),
    ("hybridep-edp", "base=hybridep,hybrid_domain=2,compression=1", "ep=2", ONE_NODE, "gshard", None, "swiglu", 2),
]

# Few tokens, none, and skewed routing: chunks with no rows on any member of a group (MoNTA's
# ESP AllGather and ReduceScatter, the combine's TP AllGather) and empty batches. By case: the
# tokens of each batch (TP members share one), and whether the gate sends every token to
# experts 3 and 2 (:func:`skew`), leaving the other EP members nothing. Without the collectives
# skipping empty blocks the MoNTA and FSMoE cases died with SIGFPE in gloo's AllGather.
EDGES = {
    "skewed-monta-o1": ((6, 1), True),
    "few-monta-o2": ((3, 2), False),
    "skewed-monta-o2": ((8, 5), True),
    "empty-monta-o3": ((0, 6), True),
    "empty-fsmoe-tp": ((0, 0), False),
    "skewed-fsmoe-tp": ((4, 8), True),
    "empty-baseline": ((0, 0, 0, 0), False),
    "skewed-baseline": ((0, 8, 1, 3), True),
    "skewed-dedup": ((0, 8, 1, 3), True),
}
CASES += [
    ("skewed-monta-o1", "monta-o1", "tp=2,ep=2,esp=2", TWO_NODES, "gshard", None, "gelu", 2),
    ("few-monta-o2", "base=monta-o2,chunks=4", "tp=2,ep=2,esp=2", TWO_NODES, "gshard", None, "gelu", 2),
    ("skewed-monta-o2", "base=monta-o2,chunks=4", "tp=2,ep=2,esp=2", TWO_NODES, "gshard", None, "gelu", 2),
    ("empty-monta-o3", "monta-o3", "tp=2,ep=2,esp=2", TWO_NODES, "gshard", None, "gelu", 2),
    ("empty-fsmoe-tp", "fsmoe", "tp=2,ep=2,esp=2", TWO_NODES, "gshard", None, "gelu", 2),
    ("skewed-fsmoe-tp", "fsmoe", "tp=2,ep=2,esp=2", TWO_NODES, "gshard", None, "gelu", 2),
    ("empty-baseline", "baseline", "ep=4", ONE_NODE, "gshard", None, "gelu", 2),
    ("skewed-baseline", "base=baseline,chunks=2", "ep=4", ONE_NODE, "gshard", None, "gelu", 2),
    ("skewed-dedup", "base=fsmoe,a2a=dedup,chunks=2", "ep=4", TWO_NODES, "gshard", None, "gelu", 2),
]


def skew(ref):
    """The reference gate made to send every token of :func:`skewed_batch` to experts 3 and 2
    (scores about 4.8 and 3.2 against about 0 for the rest)."""
    with torch.no_grad():
        ref.router.weight.mul_(0.01)
        ref.router.weight[3] += 0.3
        ref.router.weight[2] += 0.2


def skewed_batch(tokens, gen):
    return 0.1 * torch.randn(tokens, HIDDEN, generator=gen) + 1.0


# Every A2A algorithm of sched's table (sched/a2a_routing.h) on two nodes, chunked: a new
# algorithm is tested here by its table entry alone.
CASES += [(f"a2a-{a}", f"base=fsmoe,a2a={a},chunks=2", "ep=4", TWO_NODES, "gshard", None,
           "gelu", 2) for a in _moecomm.a2a_algorithms()]


# Node-limited routing (router_groups, router_group_top_k by case): on two nodes with one
# group per node, every token's experts on one node; 4 groups of 2, each token within 2.
GROUPS = {"node-limited": (2, 1), "node-limited-xmoe": (4, 2), "node-limited-sigmoid": (4, 1)}
CASES += [
    ("node-limited", "base=fsmoe,a2a=2dh,chunks=2", "ep=4", TWO_NODES, "gshard", None, "gelu", 2),
    ("node-limited-xmoe", "fsmoe", "ep=4", ONE_NODE, "xmoe", None, "gelu", 2),
    ("node-limited-sigmoid", "baseline", "ep=4", TWO_NODES, "sigmoid", 1.0, "gelu", 2),
]


# a2a=dedup on two nodes (DeepEP's normal kernels: a token crosses once per node and reaches
# each member once, the gate weights applied at the experts, the combine summing per token):
# chunked, capacity (dropped slots), node-limited (every token's experts on one node), gates
# whose weights are not a softmax over the kept slots, swiglu with recomputed experts, and the
# experts waiting for every chunk.
GROUPS["dedup-node-limited"] = (2, 1)
CASES += [
    ("dedup-capacity", "base=fsmoe,a2a=dedup,chunks=2", "ep=4", TWO_NODES, "gshard", 1.0, "gelu", 2),
    ("dedup-node-limited", "base=baseline,a2a=dedup", "ep=4", TWO_NODES, "gshard", None, "gelu", 2),
    ("dedup-expert-choice", "base=fsmoe,a2a=dedup,chunks=2", "ep=4", TWO_NODES, "expert-choice", 1.0, "gelu", 2),
    ("dedup-sigmoid", "base=baseline,a2a=dedup", "ep=4", TWO_NODES, "sigmoid", None, "gelu", 2),
    ("dedup-recompute", "base=fsmoe,a2a=dedup,chunks_fwd=3,chunks_bwd=2,recompute_experts=true", "ep=4", TWO_NODES, "gshard", None, "swiglu", 2),
    ("dedup-experts-wait", "base=baseline,a2a=dedup,chunks=3,pipeline_experts=false", "ep=4", TWO_NODES, "xmoe", None, "gelu", 2),
]


# Cases whose GradSync runs after the backward (overlap=False); the rest start the gradient
# ops during it.
AFTER_BACKWARD = {"edp-fsmoe", "tp-replicate"}


def run_case(case, rank):
    import moecomm.torch as mt
    from torch_reference import ReferenceMoE
    name, strategy, parallel, cluster, gate, cf, ffn, k = case
    groups, group_top_k = GROUPS.get(name, (1, 0))
    ref = ReferenceMoE(HIDDEN, FFN, EXPERTS, k, gate, cf, ffn, seed=7, router_groups=groups,
                       router_group_top_k=group_top_k)
    sizes, skewed = EDGES.get(name, (None, False))
    if skewed:
        skew(ref)
    layer = mt.MoELayer(HIDDEN, FFN, EXPERTS, k, gate=gate, capacity_factor=cf, ffn_type=ffn,
                        router_groups=groups, router_group_top_k=group_top_k,
                        strategy=strategy, parallel=parallel, cluster=cluster, tokens=TOKENS)
    with torch.no_grad():
        layer.gate_weight.copy_(ref.router.weight)
        if ref.embeddings is not None:
            layer.expert_embeddings.copy_(ref.embeddings)
    layer.load_experts(ref.stacked_experts())
    tp = layer.schedule.parallel["tp"]
    batches = dist.get_world_size() // tp
    sizes = sizes or (TOKENS,) * batches
    assert len(sizes) == batches, f"{name}: {len(sizes)} batch sizes for {batches} batches"
    gen = torch.Generator().manual_seed(11)
    draw = skewed_batch if skewed else lambda t, g: torch.randn(t, HIDDEN, generator=g)
    xs = [draw(t, gen) for t in sizes]
    rs = [torch.randn(t, HIDDEN, generator=gen) for t in sizes]
    # The reference: every batch through one MoE, the loss summed over batches.
    ref_x = [x.clone().requires_grad_() for x in xs]
    ref_out = [ref(x) for x in ref_x]
    sum((o * r).sum() for o, r in zip(ref_out, rs)).backward()
    # The layer: this rank's batch (TP members share one).
    b = rank // tp
    sync = mt.GradSync([layer], overlap=name not in AFTER_BACKWARD)
    x = xs[b].clone().requires_grad_()
    out = layer(x)
    (out * rs[b]).sum().backward()
    sync.step()
    dense_ref = [ref.router.weight.grad] + ([ref.embeddings.grad] if ref.embeddings is not None else [])
    want = ReferenceShard(layer, ref.stacked_grads())
    pairs = {"output": [(out, ref_out[b])], "input_grad": [(x.grad, ref_x[b].grad)],
             "gate_grad": list(zip([p.grad for p in layer.dense_params()], dense_ref)),
             "expert_grad": [(getattr(layer, n).grad, w) for n, w in want.items()]}
    diffs = {k: max(difference(a, w) for a, w in v) for k, v in pairs.items()}
    return {"diffs": diffs, "strategy": layer.strategy, "ops": len(layer.last_times.spans)}


def run_two_lina_layers(rank):
    """Two chained layers under Lina with 3 gradient micro-ops per bucket (ep=2: experts are
    data parallel too): outputs and gradients against two chained references, and Lina's
    rule on the measured spans: the output layer's micro-ops run during the input layer's
    backward, and none runs beside an A2A."""
    import moecomm.torch as mt
    from torch_reference import ReferenceMoE
    strategy = "base=lina,grad_partitions=3"
    refs = [ReferenceMoE(HIDDEN, FFN, EXPERTS, 2, "gshard", None, "gelu", seed=s) for s in (7, 8)]
    layers = [mt.MoELayer(HIDDEN, FFN, EXPERTS, 2, strategy=strategy, parallel="ep=2",
                          tokens=TOKENS) for _ in refs]
    for layer, ref in zip(layers, refs):
        with torch.no_grad():
            layer.gate_weight.copy_(ref.router.weight)
        layer.load_experts(ref.stacked_experts())
    sync = mt.GradSync(layers)
    gen = torch.Generator().manual_seed(11)
    xs = [torch.randn(TOKENS, HIDDEN, generator=gen) for _ in range(4)]
    rs = [torch.randn(TOKENS, HIDDEN, generator=gen) for _ in range(4)]
    ref_x = [x.clone().requires_grad_() for x in xs]
    ref_out = [refs[1](refs[0](x)) for x in ref_x]
    sum((o * r).sum() for o, r in zip(ref_out, rs)).backward()
    x = xs[rank].clone().requires_grad_()
    out = layers[1](layers[0](x))
    (out * rs[rank]).sum().backward()
    sync.step()
    pairs = {"output": [(out, ref_out[rank])], "input_grad": [(x.grad, ref_x[rank].grad)],
             "gate_grad": [], "expert_grad": []}
    for layer, ref in zip(layers, refs):
        pairs["gate_grad"].append((layer.gate_weight.grad, ref.router.weight.grad))
        want = ReferenceShard(layer, ref.stacked_grads())
        pairs["expert_grad"] += [(getattr(layer, n).grad, w) for n, w in want.items()]
    diffs = {k: max(difference(a, w) for a, w in v) for k, v in pairs.items()}
    absolute = lambda times: [(times.origin + s, times.origin + e, i)
                              for i, (s, e) in times.spans.items()]
    a2a = [(s, e) for layer in layers for s, e, i in absolute(layer.last_times)
           if layer.schedule_op(i).kind == "all_to_all"]
    micro = [(s, e) for s, e, i in absolute(sync.last_times[1])
             if layers[1].schedule_op(i).name == "grad.expert.allreduce"]
    input_backward_a2a_end = max(e for s, e, i in absolute(layers[0].last_times)
                                 if layers[0].schedule_op(i).kind == "all_to_all")
    beside = sum(1 for ms, me in micro for s, e in a2a if ms < e and s < me)
    early = sum(1 for ms, me in micro if ms < input_backward_a2a_end)
    return {"diffs": diffs, "strategy": layers[0].strategy, "ops": len(micro),
            "micro_beside_a2a": beside, "micro_during_backward": early}


def difference(got, want):
    """Largest difference over the reference's largest magnitude (at least 1): fp32 sums in
    another order differ by a few ulps of the magnitude. A gradient nothing reached (None)
    is zero; an empty batch's tensors differ by nothing, once their shapes agree."""
    got = torch.zeros_like(want) if got is None else got
    assert got.shape == want.shape, f"shape {tuple(got.shape)}, reference's {tuple(want.shape)}"
    if want.numel() == 0:
        return 0.0
    return (got - want).abs().max().item() / max(1.0, want.abs().max().item())


def ReferenceShard(layer, grads):
    """The reference's expert gradients cut to this rank's experts and ESP shard (the output
    bias is applied, and learned, by ESP shard 0: the others' stays zero)."""
    first = layer.position * layer.local  # HybridEP: ownership follows the position order
    width = layer.ffn_hidden // layer.esp
    ffn = slice(layer.shard * width, (layer.shard + 1) * width)
    out = {}
    for name, g in grads.items():
        g = g[first:first + layer.local]
        out[name] = g[:, :, ffn] if name == "w2" else (g if name == "b2" else g[:, ffn])
        if name == "b2" and layer.shard != 0:
            out[name] = torch.zeros_like(out[name])
    return out


def run_rank(rank, names):
    results = {}
    if not names or "lina-two-layers" in names:
        results["lina-two-layers"] = guarded(run_two_lina_layers, rank)
    for case in CASES:
        if not names or case[0] in names:
            results[case[0]] = guarded(run_case, case, rank)
    return results


def run_all(outdir: str, names=()):
    return run_on_ranks(run_rank, outdir, list(names))


if __name__ == "__main__":
    import tempfile
    d = tempfile.mkdtemp()
    for r, res in enumerate(run_all(d, sys.argv[1:])):
        for name, v in res.items():
            print(r, name, v.get("diffs"), v.get("micro_beside_a2a"),
                  v.get("micro_during_backward"), v.get("error", "")[-600:])
