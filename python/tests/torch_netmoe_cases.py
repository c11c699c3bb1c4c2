"""moecomm.torch.SampleMovingMoE (placement=netmoe) on 4 gloo processes: per rank and case,
the largest differences from a plain single-process block y = h + MoE(LN(h)), where the
samples went, and each bad input's error message."""
from __future__ import annotations

import sys
import traceback

import torch

from torch_spawn import WORLD, guarded, run_on_ranks

HIDDEN, FFN, EXPERTS, SAMPLES, SEQ, VOCAB = 16, 32, 8, 4, 6, 50
ONE_NODE = None  # the layer's default: one node of 4 ranks
TWO_NODES = {"name": "2x2", "levels": [
    {"name": "node", "count": 2, "bandwidth_GBps": 1, "latency_us": 20},
    {"name": "gpu", "count": 2, "bandwidth_GBps": 10, "latency_us": 5}],
    "device": {"tflops": 1, "memory_GB": 16, "memory_bandwidth_GBps": 50}}

# (id, strategy, parallel, cluster, gate, ffn_type, top_k, blocks, targets)
CASES = [
    ("netmoe", "netmoe", "ep=4", ONE_NODE, "gshard", "gelu", 2, 1, False),
    ("netmoe-2x2", "netmoe", "ep=4", TWO_NODES, "gshard", "gelu", 2, 1, True),
    ("chunks-2", "base=netmoe,chunks=2", "ep=4", TWO_NODES, "gshard", "gelu", 2, 1, False),
    ("chunks-3-2-wait", "base=netmoe,chunks_fwd=3,chunks_bwd=2,pipeline_experts=false", "ep=4",
     TWO_NODES, "sigmoid", "gelu", 1, 1, False),
    ("2dh-xmoe-swiglu", "base=netmoe,a2a=2dh,chunks=2", "ep=4", TWO_NODES, "xmoe", "swiglu", 2, 1,
     False),
    ("1dh", "base=netmoe,a2a=1dh", "ep=4", TWO_NODES, "gshard", "gelu", 2, 1, False),
    ("pairwise", "base=netmoe,a2a=pairwise,chunks=2", "ep=4", TWO_NODES, "gshard", "gelu", 2, 1,
     False),
    ("edp", "base=netmoe,chunks=2", "ep=2", TWO_NODES, "gshard", "gelu", 2, 1, False),
    ("two-blocks", "base=netmoe,chunks_fwd=2,chunks_bwd=3", "ep=4", TWO_NODES, "gshard", "gelu", 2,
     2, True),
]


class ReferenceBlock(torch.nn.Module):
    """y = x + MoE(LN(x)) with torch.nn.LayerNorm and torch_reference's MoE (its own gate,
    torch.nn.Linear experts): no moecomm code."""

    def __init__(self, gate: str, ffn_type: str, top_k: int, seed: int) -> None:
        super().__init__()
        from torch_reference import ReferenceMoE
        self.moe = ReferenceMoE(HIDDEN, FFN, EXPERTS, top_k, gate, None, ffn_type, seed=seed)
        self.ln = torch.nn.LayerNorm(HIDDEN)
        gen = torch.Generator().manual_seed(seed + 100)
        with torch.no_grad():  # LN's own parameters, away from 1 and 0
            self.ln.weight.copy_(1 + 0.3 * torch.randn(HIDDEN, generator=gen))
            self.ln.bias.copy_(0.2 * torch.randn(HIDDEN, generator=gen))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.moe(self.ln(x))

    def counts(self, x: torch.Tensor) -> torch.Tensor:
        """Slots per (sample, expert) of x [samples, S, hidden]: NetMoE's Eq. 2."""
        out = torch.zeros(x.shape[0], EXPERTS, dtype=torch.int64)
        with torch.no_grad():
            for s in range(x.shape[0]):
                for _, e, _ in self.moe.slots(self.ln(x[s])):
                    out[s, e] += 1
        return out


def copy_into(layer, ref: ReferenceBlock) -> None:
    with torch.no_grad():
        layer.gate_weight.copy_(ref.moe.router.weight)
        if ref.moe.embeddings is not None:
            layer.expert_embeddings.copy_(ref.moe.embeddings)
        layer.ln2.weight.copy_(ref.ln.weight)
        layer.ln2.bias.copy_(ref.ln.bias)
    layer.load_experts(ref.moe.stacked_experts())


def rel(a: torch.Tensor, want: torch.Tensor) -> float:
    """Largest difference over the reference's largest magnitude (at least 1)."""
    return (a - want).abs().max().item() / max(1.0, want.abs().max().item())


def run_case(case, rank: int, world: int) -> dict:
    import moecomm
    import moecomm.torch as mt
    name, strategy, parallel, cluster, gate, ffn, k, blocks, with_targets = case
    refs = [ReferenceBlock(gate, ffn, k, seed=7 + i) for i in range(blocks)]
    layers = [mt.SampleMovingMoE(HIDDEN, FFN, EXPERTS, k, gate=gate, ffn_type=ffn,
                                 strategy=strategy, parallel=parallel, cluster=cluster,
                                 samples=SAMPLES, seq_len=SEQ,
                                 vocab_size=VOCAB if with_targets and i == blocks - 1 else None)
              for i in range(blocks)]
    for layer, ref in zip(layers, refs):
        copy_into(layer, ref)
    group, member = layers[0].ep_group, layers[0].member
    P, B = len(group), SAMPLES
    gen = torch.Generator().manual_seed(11)
    xs = torch.randn(world, B, SEQ, HIDDEN, generator=gen)  # each rank's home samples
    rs = torch.randn(world, B, SEQ, HIDDEN, generator=gen)  # the loss's weights per sample
    targets = torch.randint(0, VOCAB, (world, B, SEQ), generator=gen)
    # The reference: every sample through the blocks, the loss summed over all of them.
    ref_x = xs.clone().requires_grad_()
    ref_in, x = [], ref_x.reshape(world * B, SEQ, HIDDEN)
    for ref in refs:
        ref_in.append(x.detach().reshape(world, B, SEQ, HIDDEN))
        x = torch.stack([ref(x[s]) for s in range(x.shape[0])])
    ref_y = x.reshape(world, B, SEQ, HIDDEN)
    (ref_y * rs).sum().backward()
    # The layers: this rank's samples; a global id g of the EP group is world rank
    # group[g // B]'s sample g % B.
    home = lambda ids: ([group[int(g) // B] for g in ids], [int(g) % B for g in ids])
    h = xs[rank].clone().requires_grad_()
    y, ids = h, None
    checks = {"placement": True, "counts": True, "home_load": True, "targets": True}
    moved_nodes = moved_ranks = 0
    dpn = layers[0].grid[1]
    for i, layer in enumerate(layers):
        out = layer(y, ids, targets[rank] if layer.moves_targets else None)
        # What the placement solved: the group's counts by global id, as the reference routes.
        want = refs[i].counts(ref_in[i][group].reshape(P * B, SEQ, HIDDEN))
        checks["counts"] &= bool((torch.as_tensor(layer.last_counts) == want).all())
        solved = moecomm.place.solve(want.numpy(), [e * P // EXPERTS for e in range(EXPERTS)],
                                     dpn, devices=P)
        got = torch.as_tensor(layer.last_placement.sample_device)
        checks["placement"] &= bool((got == torch.as_tensor(solved.sample_device)).all())
        checks["placement"] &= out.sample_ids.tolist() == torch.nonzero(got == member
                                                                       ).reshape(-1).tolist()
        load = want.reshape(P, B, EXPERTS).sum(1)  # by home member
        checks["home_load"] &= bool((layer.home_expert_load == load).all())
        if layer.moves_targets:
            r, b = home(out.sample_ids)
            checks["targets"] &= bool((out.targets == targets[r, b]).all())
        if i == 0:  # the samples sat at home: count those that moved rank, and node
            moved_ranks = sum(int(got[g]) != g // B for g in range(P * B))
            moved_nodes = sum(int(got[g]) // dpn != g // B // dpn for g in range(P * B))
        y, ids = out.y, out.sample_ids
    r, b = home(ids)
    (y * rs[r, b]).sum().backward()
    mt.GradSync(layers).step()
    pairs = {"output": [(y, ref_y[r, b])], "input_grad": [(h.grad, ref_x.grad[rank])],
             "gate_grad": [], "ln_grad": [], "expert_grad": []}
    for layer, ref in zip(layers, refs):
        dense = [ref.moe.router.weight.grad] + (
            [ref.moe.embeddings.grad] if ref.moe.embeddings is not None else [])
        pairs["gate_grad"] += list(zip([p.grad for p in layer.dense_params()[:-2]], dense))
        pairs["ln_grad"] += [(layer.ln2.weight.grad, ref.ln.weight.grad),
                             (layer.ln2.bias.grad, ref.ln.bias.grad)]
        first = member * layer.local
        for n, g in ref.moe.stacked_grads().items():
            pairs["expert_grad"].append((getattr(layer, n).grad, g[first:first + layer.local]))
    timed = {row["name"] for row in mt.op_times(layers[0])}
    return {"diffs": {k: max(rel(a, w) for a, w in v) for k, v in pairs.items()},
            "timed": sorted(timed),
            "checks": checks, "moved_nodes": moved_nodes, "moved_ranks": moved_ranks,
            "strategy": layers[0].strategy,
            "ops": len(layers[0].last_times.spans)}


def layer(mt, **kw):
    args = dict(strategy="netmoe", parallel="ep=4", samples=SAMPLES, seq_len=SEQ)
    args.update(kw)
    return mt.SampleMovingMoE(HIDDEN, FFN, EXPERTS, 2, **args)


def home_h(rank: int, batch: int = SAMPLES) -> torch.Tensor:
    return torch.randn(batch, SEQ, HIDDEN, generator=torch.Generator().manual_seed(rank))


# Bad input: each case's moecomm.Error message, on every rank.
ERRORS = {
    "not-netmoe": lambda mt, r: layer(mt, strategy="fsmoe"),
    "expert-choice": lambda mt, r: layer(mt, gate="expert-choice"),
    "tp": lambda mt, r: layer(mt, parallel="tp=2,ep=2,esp=2", cluster=TWO_NODES),
    "ep-1": lambda mt, r: layer(mt, parallel="ep=1"),
    "hybrid": lambda mt, r: layer(mt, strategy="base=netmoe,expert_transfer=hybrid"),
    "dedup": lambda mt, r: layer(mt, strategy="base=netmoe,a2a=dedup", cluster=TWO_NODES),
    "ffn-type": lambda mt, r: layer(mt, ffn_type="relu"),
    "samples": lambda mt, r: layer(mt, samples=0),
    "rank-2": lambda mt, r: layer(mt)(torch.zeros(SAMPLES * SEQ, HIDDEN)),
    "hidden": lambda mt, r: layer(mt)(torch.zeros(SAMPLES, SEQ, HIDDEN - 1)),
    "dtype": lambda mt, r: layer(mt)(home_h(r).double()),
    "sample-ids-shape": lambda mt, r: layer(mt)(home_h(r), torch.arange(SAMPLES + 1)),
    "sample-ids-twice": lambda mt, r: layer(mt)(home_h(r), torch.arange(SAMPLES)),
    "batch-differs": lambda mt, r: layer(mt)(home_h(r, SAMPLES + (r == 2))),
    "targets-unbuilt": lambda mt, r: layer(mt)(home_h(r), None,
                                               torch.zeros(SAMPLES, SEQ, dtype=torch.int64)),
    "targets-missing": lambda mt, r: layer(mt, vocab_size=VOCAB)(home_h(r)),
    "targets-shape": lambda mt, r: layer(mt, vocab_size=VOCAB)(
        home_h(r), None, torch.zeros(SAMPLES, SEQ + 1, dtype=torch.int64)),
}


def run_rank(rank: int, names) -> dict:
    import moecomm
    import moecomm.torch as mt
    results = {case[0]: guarded(run_case, case, rank, WORLD) for case in CASES
               if not names or case[0] in names}
    errors = {}
    for name, make in ERRORS.items():
        if names and name not in names:
            continue
        try:
            make(mt, rank)
            errors[name] = None
        except moecomm.Error as e:
            errors[name] = str(e)
        except Exception:
            errors[name] = "not moecomm.Error: " + traceback.format_exc()
    return {"cases": results, "errors": errors}


def run_all(outdir: str, names=()):
    return run_on_ranks(run_rank, outdir, list(names))


if __name__ == "__main__":
    import tempfile
    d = tempfile.mkdtemp()
    for r, res in enumerate(run_all(d, sys.argv[1:])):
        for name, v in res["cases"].items():
            print(r, name, v.get("diffs"), v.get("checks"), v.get("moved_ranks"),
                  v.get("moved_nodes"),
                  v.get("error", "")[-1500:])
        for name, v in res["errors"].items():
            print(r, name, v)
