"""Gradient accumulation with moecomm.torch.GradSync(micro_batches=M), on 4 gloo processes: M
micro-batches of b tokens accumulated and synchronized once equal one batch of M b tokens
(outputs, input gradients and the synchronized gradients of a dense layer before the MoE,
of the gate and of the experts), for each strategy; how many gradient collectives a step
issues, and when, for M = 1 and M = 4; the errors of a step() too early, of a backward too
many and of the knobs a single layer refuses."""
from __future__ import annotations

import collections
from typing import Any, Dict, List

import torch
import torch.distributed as dist

from torch_cases import TWO_NODES, difference
from torch_spawn import guarded, run_on_ranks

HIDDEN, FFN, EXPERTS = 16, 32, 8
M, B = 4, 6  # micro-batches per step, tokens per micro-batch (per rank)
ONE_NODE = None

# (id, strategy, parallel, cluster, ffn_type, overlap, average). The dropless layout (a
# capacity makes a token's output depend on the rest of its batch) and HybridEP without SR
# compression (the codec's state advances with each forward's expert AllGather).
CASES = [
    ("baseline", "baseline", "ep=4", ONE_NODE, "gelu", True, True),
    ("baseline-edp", "baseline", "ep=2", ONE_NODE, "gelu", True, False),
    ("lina-edp", "base=lina,grad_partitions=3", "ep=2", ONE_NODE, "gelu", True, True),
    ("fsmoe", "base=fsmoe,chunks_fwd=3,chunks_bwd=2", "ep=4", ONE_NODE, "gelu", True, True),
    ("fsmoe-edp-after", "base=fsmoe,grad_partitions=2", "ep=2", ONE_NODE, "gelu", False, True),
    ("hier-a2a", "hier-a2a", "ep=4", TWO_NODES, "gelu", True, True),
    ("monta-o1", "monta-o1", "tp=2,ep=2,esp=2", TWO_NODES, "gelu", True, True),
    ("monta-o2", "monta-o2", "tp=2,ep=2,esp=2", TWO_NODES, "gelu", True, False),
    ("monta-o3", "monta-o3", "tp=2,ep=2,esp=2", TWO_NODES, "swiglu", True, True),
    ("hybridep", "base=hybridep,hybrid_domain=2,compression=1", "ep=4", ONE_NODE, "gelu", True,
     True),
    ("hybridep-edp", "base=hybridep,hybrid_domain=2,compression=1", "ep=2", ONE_NODE, "swiglu",
     True, True),
]
NETMOE = ("netmoe", "base=netmoe,chunks=2", "ep=4", TWO_NODES)
SEQ, SAMPLES = 3, 2  # NetMoE: tokens per sample, samples per micro-batch (per rank)


def _model(strategy, parallel, cluster, ffn, micro_batches, overlap, average):
    """A dense layer (a model's parameter outside the MoE layers) before an MoELayer, and
    their GradSync; the same weights whatever micro_batches is."""
    import moecomm.torch as mt
    dense = torch.nn.Linear(HIDDEN, HIDDEN)
    gen = torch.Generator().manual_seed(5)
    with torch.no_grad():
        dense.weight.copy_(torch.randn(HIDDEN, HIDDEN, generator=gen) / HIDDEN ** 0.5)
        dense.bias.copy_(0.1 * torch.randn(HIDDEN, generator=gen))
    layer = mt.MoELayer(HIDDEN, FFN, EXPERTS, 2, ffn_type=ffn, strategy=strategy,
                        parallel=parallel, cluster=cluster, tokens=M * B, seed=7)
    sync = mt.GradSync([layer], dense=list(dense.parameters()), average=average,
                       overlap=overlap, micro_batches=micro_batches)
    return dense, layer, sync


def run_case(case, rank: int) -> Dict[str, Any]:
    name, strategy, parallel, cluster, ffn, overlap, average = case
    big = _model(strategy, parallel, cluster, ffn, None, overlap, average)
    acc = _model(strategy, parallel, cluster, ffn, M, overlap, average)
    tp = big[1].schedule.parallel["tp"]
    gen = torch.Generator().manual_seed(11 + rank // tp)  # TP members share their tokens
    x = torch.randn(M * B, HIDDEN, generator=gen)
    r = torch.randn(M * B, HIDDEN, generator=gen)
    # One batch of M B tokens, its loss the mean over them.
    dense, layer, sync = big
    x_big = x.clone().requires_grad_()
    out_big = layer(dense(x_big))
    ((out_big * r).sum() / (M * B)).backward()
    sync.step()
    # M micro-batches of B tokens, each loss the mean over its B: GradSync scales by 1/M.
    dense, layer, sync = acc
    outs, grads = [], []
    for m in range(M):
        rows = slice(m * B, (m + 1) * B)
        xm = x[rows].clone().requires_grad_()
        out = layer(dense(xm))
        ((out * r[rows]).sum() / B).backward()
        outs.append(out)
        grads.append(xm.grad / M)
    sync.step()
    params = lambda model: list(model[0].parameters()) + model[1].dense_params()
    pairs = {"output": [(torch.cat(outs), out_big)],
             "input_grad": [(torch.cat(grads), x_big.grad)],
             "dense_grad": [(a.grad, w.grad) for a, w in zip(params(acc), params(big))],
             "expert_grad": [(a.grad, w.grad) for a, w in
                             zip(acc[1].expert_params(), big[1].expert_params())]}
    diffs = {k: max(difference(a, w) for a, w in v) for k, v in pairs.items()}
    # The compared gradients are synchronized ones: a dense gradient is the same on every
    # data-parallel replica (checked across ranks by the test).
    return {"diffs": diffs, "strategy": layer.strategy,
            "gate_grad": acc[1].gate_weight.grad.reshape(-1)[:4].tolist()}


def run_netmoe(rank: int) -> Dict[str, Any]:
    """SampleMovingMoE: samples move to other ranks, so outputs are compared by sample id
    over the EP group (every rank's gathered)."""
    import moecomm.torch as mt
    name, strategy, parallel, cluster = NETMOE
    world = dist.get_world_size()
    gen = torch.Generator().manual_seed(11)
    xs = torch.randn(world, M * SAMPLES, SEQ, HIDDEN, generator=gen)  # each rank's samples
    rs = torch.randn(world, M * SAMPLES, SEQ, HIDDEN, generator=gen)

    def model(micro_batches, samples):
        layer = mt.SampleMovingMoE(HIDDEN, FFN, EXPERTS, 2, strategy=strategy,
                                   parallel=parallel, cluster=cluster, samples=samples,
                                   seq_len=SEQ, seed=7)
        return layer, mt.GradSync([layer], average=True, micro_batches=micro_batches)

    def run(layer, h, first, per):
        """Forward of this rank's samples [first, first + per) of ``xs``; its outputs by
        (home rank, sample), and the loss, the mean over the samples, backward."""
        group = layer.ep_group
        out = layer(h)
        home = [(group[int(g) // per], first + int(g) % per) for g in out.sample_ids]
        weights = torch.stack([rs[a, b] for a, b in home])
        ((out.y * weights).sum() / per).backward()
        got: List[Any] = [None] * world
        dist.all_gather_object(got, [(a, b, y) for (a, b), y in zip(home, out.y.detach())])
        return {(a, b): y for part in got for a, b, y in part}

    layer_big, sync_big = model(None, M * SAMPLES)
    h_big = xs[rank].clone().requires_grad_()
    out_big = run(layer_big, h_big, 0, M * SAMPLES)
    sync_big.step()
    layer_acc, sync_acc = model(M, SAMPLES)
    out_acc, grads = {}, []
    for m in range(M):
        h = xs[rank, m * SAMPLES:(m + 1) * SAMPLES].clone().requires_grad_()
        out_acc.update(run(layer_acc, h, m * SAMPLES, SAMPLES))
        grads.append(h.grad / M)
    sync_acc.step()
    assert sorted(out_acc) == sorted(out_big), "the samples differ"
    keys = sorted(out_big)
    pairs = {"output": [(torch.stack([out_acc[k] for k in keys]),
                         torch.stack([out_big[k] for k in keys]))],
             "input_grad": [(torch.cat(grads), h_big.grad)],
             "dense_grad": [(a.grad, w.grad) for a, w in
                            zip(layer_acc.dense_params(), layer_big.dense_params())],
             "expert_grad": [(a.grad, w.grad) for a, w in
                             zip(layer_acc.expert_params(), layer_big.expert_params())]}
    diffs = {k: max(difference(a, w) for a, w in v) for k, v in pairs.items()}
    return {"diffs": diffs, "strategy": layer_acc.strategy,
            "gate_grad": layer_acc.gate_weight.grad.reshape(-1)[:4].tolist()}


# Counted steps: (id, strategy, parallel, overlap). On ep=2 the token path issues no
# AllReduce, so every AllReduce is a gradient op.
COUNTED = [
    ("baseline", "baseline", "ep=2", True),
    ("lina", "base=lina,grad_partitions=3", "ep=2", True),
    ("fsmoe-after", "base=fsmoe,grad_partitions=2", "ep=2", False),
]


class Calls:
    """torch.distributed's AllReduces, counted by the phase of the step they are issued in."""

    def __init__(self) -> None:
        self.by_phase: Dict[str, int] = collections.Counter()
        self.phase = "setup"
        self._real = dist.all_reduce

    def __enter__(self) -> "Calls":
        def counted(*args, **kwargs):
            self.by_phase[self.phase] += 1
            return self._real(*args, **kwargs)
        dist.all_reduce = counted
        return self

    def __exit__(self, *exc) -> None:
        dist.all_reduce = self._real


def count_step(strategy: str, parallel: str, overlap: bool, micro_batches: int,
               rank: int) -> Dict[str, Any]:
    """One step of ``micro_batches`` backwards: the AllReduces issued in each backward and in
    step(), the aten ops of each backward (the same layer without GradSync: "plain"), and the
    host syncs of the backwards and step()."""
    import moecomm.torch as mt
    from torch_token_counts import Ops, Syncs
    from moecomm.torch.grad_sync import GRAD_OPS
    layers = [mt.MoELayer(HIDDEN, FFN, EXPERTS, 2, strategy=strategy, parallel=parallel,
                          tokens=B, seed=7) for _ in range(2)]
    sync = mt.GradSync(layers[:1], overlap=overlap, micro_batches=micro_batches)
    gen = torch.Generator().manual_seed(rank)
    xs = [torch.randn(B, HIDDEN, generator=gen) for _ in range(micro_batches)]
    out: Dict[str, Any] = {"allreduce": {}, "ops": {}, "plain_ops": {}, "syncs": {},
                           "grad_ops": sum(1 for o in layers[0].schedule.ops(rank)
                                           if o.role in GRAD_OPS)}
    with Calls() as calls:
        for m, x in enumerate(xs):
            for which, layer in (("ops", layers[0]), ("plain_ops", layers[1])):
                y = layer(x)
                calls.phase = f"backward {m + 1}" if which == "ops" else "plain"
                syncs, ops = Syncs(), Ops()
                with syncs, ops:
                    y.sum().backward()
                out[which][m + 1] = ops.outside + ops.inside
                if which == "ops":
                    out["syncs"][f"backward {m + 1}"] = dict(syncs.calls)
        calls.phase = "step"
        syncs = Syncs()
        with syncs:
            sync.step()
        out["syncs"]["step"] = dict(syncs.calls)
    out["allreduce"] = dict(calls.by_phase)
    return out


def refusals(rank: int) -> Dict[str, Any]:
    """The step knobs a single layer refuses or accepts, and GradSync's accumulation errors."""
    import moecomm
    import moecomm.torch as mt

    def error(fn) -> Any:
        try:
            fn()
            return None
        except moecomm.Error as e:
            return str(e)

    layer = lambda s: mt.MoELayer(HIDDEN, FFN, EXPERTS, 2, strategy=s, parallel="ep=4",
                                  tokens=B)
    netmoe = lambda s: mt.SampleMovingMoE(HIDDEN, FFN, EXPERTS, 2, strategy=s, parallel="ep=4",
                                          samples=SAMPLES, seq_len=SEQ)
    out = {"zero": error(lambda: layer("base=fsmoe,zero=1")),
           "zero-3": error(lambda: layer("base=baseline,zero=3")),
           "overlap-microbatches": error(lambda: layer("base=fsmoe,overlap_microbatches=true")),
           "netmoe-zero": error(lambda: netmoe("base=netmoe,zero=2")),
           "netmoe-overlap": error(lambda: netmoe("base=netmoe,overlap_microbatches=true"))}
    for s in ("gpipe", "1f1b", "interleaved:2"):
        out[f"pp-{s}"] = error(lambda: layer(f"base=fsmoe,pp_schedule={s}"))
    out["pp-netmoe"] = error(lambda: netmoe("base=netmoe,pp_schedule=gpipe"))
    for bad in (0, -1, 2.0, "4", True):
        out[f"micro-{bad!r}"] = error(lambda: mt.GradSync([layer("baseline")],
                                                          micro_batches=bad))
    # A step() after 2 of 3 backwards, then the 3rd and a step that runs; a 4th backward.
    gen = torch.Generator().manual_seed(rank)
    for overlap in (True, False):
        moe = layer("baseline")
        sync = mt.GradSync([moe], overlap=overlap, micro_batches=3)
        backward = lambda: moe(torch.randn(B, HIDDEN, generator=gen)).sum().backward()
        out[f"none-{overlap}"] = error(sync.step)
        backward()
        backward()
        out[f"early-{overlap}"] = error(sync.step)
        backward()
        out[f"extra-{overlap}"] = error(backward)
        out[f"step-{overlap}"] = error(sync.step)
        out[f"again-{overlap}"] = error(sync.step)
        backward()
        out[f"one-of-three-{overlap}"] = error(sync.step)
    # micro_batches=1: one backward per step, in either mode.
    moe = layer("baseline")
    sync = mt.GradSync([moe], overlap=False, micro_batches=1)
    moe(torch.randn(B, HIDDEN, generator=gen)).sum().backward()
    out["second-of-one"] = error(lambda: moe(torch.randn(B, HIDDEN, generator=gen)).sum()
                                 .backward())
    return out


def run_rank(rank: int, names) -> Dict[str, Any]:
    results: Dict[str, Any] = {}
    for case in CASES:
        if not names or case[0] in names:
            results[case[0]] = guarded(run_case, case, rank)
    if not names or "netmoe" in names:
        results["netmoe"] = guarded(run_netmoe, rank)
    if not names or "refusals" in names:
        results["refusals"] = guarded(refusals, rank)
    for name, strategy, parallel, overlap in COUNTED:
        for m in (1, M):
            if not names or f"count-{name}" in names:
                results[f"count-{name}-{m}"] = guarded(count_step, strategy, parallel,
                                                       overlap, m, rank)
    return results


def run_all(outdir: str, names=()):
    return run_on_ranks(run_rank, outdir, list(names))


if __name__ == "__main__":
    import sys
    import tempfile
    for r, res in enumerate(run_all(tempfile.mkdtemp(), sys.argv[1:])):
        for name, v in res.items():
            print(r, name, {k: x for k, x in v.items() if k != "error"}, v.get("error", "")[-900:])
