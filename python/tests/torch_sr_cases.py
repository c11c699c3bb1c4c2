"""HybridEP with SR compression on 4 gloo processes: the second step's outputs and gradients
against a reference that runs each token with the weights HybridEP's Algorithm 1 gives it (the
owner's exact expert, or the copy decoded from the owner's encoding against the shared expert
and, with feedback, the residual received in step 1), the copies' gradients summed into the
owners' (HybridEP returns them uncompressed). The reference's codec is written here, without
moecomm code, and checked against the C++ one the layer uses."""
from __future__ import annotations

import math


import numpy as np
import torch
import torch.nn.functional as F

from torch_spawn import guarded, run_on_ranks

HIDDEN, FFN, EXPERTS, TOKENS, LOCAL, DOMAIN = 16, 32, 8, 24, 2, 2
COMPRESSION = 0.3
CASES = [
    ("sr-shared", "base=hybridep,hybrid_levels=2,compression=0.3"),
    ("sr-feedback", "base=hybridep,hybrid_levels=2,compression=0.3,sr_feedback=true"),
    ("sr-without-shared", "base=hybridep,hybrid_levels=2,compression=0.3,shared_expert=false"),
]
NAMES = ("w1", "b1", "w2", "b2")


def processor(rank: int, expert: int) -> int:
    """HybridEP Algorithm 1 on one level (positions = ranks here): a token for an expert of
    this rank's domain runs here; one for another domain on that domain's rank at this
    rank's offset."""
    owner = expert // LOCAL
    if owner // DOMAIN == rank // DOMAIN:
        return rank
    return (owner // DOMAIN) * DOMAIN + rank % DOMAIN


def kept(numel: int, compression: float) -> int:
    """HybridEP SR's entries per tensor: a kept entry costs 8 bytes (value and index) against
    4 per dense value, so k = floor(compression numel / 2), at least 1."""
    return max(1, min(numel, math.floor(compression * numel / 2 * (1 + 1e-12))))


def sr_round_trip(w: torch.Tensor, ref: torch.Tensor, k: int) -> torch.Tensor:
    """What a copy holder decodes, written here without moecomm: the reference plus the k
    largest entries of the residual w - ref (an empty reference is zero)."""
    ref = ref if ref.numel() else torch.zeros_like(w)
    residual = w - ref
    out = ref.clone()
    top = torch.topk(residual.abs(), k).indices
    out[top] = ref[top] + residual[top]
    return out


def expected_copies(full: dict, strategy: str) -> dict:
    """Step 2's copy of every expert (step 1 moved the shared expert and, with feedback, the
    residual the holders keep)."""
    shared_on = "shared_expert=false" not in strategy
    feedback = "sr_feedback=true" in strategy
    copies = {}
    for n in NAMES:
        flat = full[n].detach().reshape(EXPERTS, -1)
        k = kept(flat.shape[1], COMPRESSION)
        shared1 = torch.zeros(flat.shape[1]) if shared_on else torch.zeros(0)
        shared2 = flat.sum(0) / EXPERTS if shared_on else torch.zeros(0)
        rows = []
        for e in range(EXPERTS):
            ref2 = shared2
            if feedback:
                received = sr_round_trip(flat[e], shared1, k) - (shared1 if shared_on else 0)
                ref2 = (shared2 if shared_on else 0) + received
            rows.append(sr_round_trip(flat[e], ref2, k))
        copies[n] = torch.stack(rows).reshape(full[n].shape)
    return copies


def codec_agrees(full: dict) -> bool:
    """The test's codec decodes what moecomm's C++ codec decodes (one expert, w/o S)."""
    from moecomm import _moecomm
    for n in NAMES:
        w = full[n].detach()[0].reshape(-1)
        k = kept(w.numel(), COMPRESSION)
        if k != _moecomm.sr_kept(w.numel(), COMPRESSION):
            return False
        empty = np.zeros(0, np.float32)
        theirs = _moecomm.sr_decode(_moecomm.sr_encode(w.numpy(), empty, k), empty, w.numel())
        if not torch.equal(torch.from_numpy(theirs), sr_round_trip(w, torch.zeros(0), k)):
            return False
    return True


def run_case(strategy: str, rank: int) -> dict:
    import moecomm.torch as mt
    from torch_reference import ReferenceMoE
    ref = ReferenceMoE(HIDDEN, FFN, EXPERTS, 2, "gshard", None, "gelu", seed=7)
    layer = mt.MoELayer(HIDDEN, FFN, EXPERTS, 2, strategy=strategy, parallel="ep=4",
                        tokens=TOKENS)
    assert layer.order == [0, 1, 2, 3] and layer.domain == DOMAIN and layer.local == LOCAL
    with torch.no_grad():
        layer.gate_weight.copy_(ref.router.weight)
    full = ref.stacked_experts()
    layer.load_experts(full)
    gen = torch.Generator().manual_seed(11)
    xs = [torch.randn(TOKENS, HIDDEN, generator=gen) for _ in range(4)]
    rs = [torch.randn(TOKENS, HIDDEN, generator=gen) for _ in range(4)]
    layer((xs[rank]).clone().requires_grad_()).sum().backward()  # step 1: the state moves
    layer.zero_grad()
    x = xs[rank].clone().requires_grad_()
    out = layer(x)
    (out * rs[rank]).sum().backward()
    mt.GradSync([layer]).step()
    # The reference's step 2.
    exact = {n: full[n].detach().clone().requires_grad_() for n in NAMES}
    copy = {n: c.clone().requires_grad_() for n, c in expected_copies(full, strategy).items()}
    gate = ref.router.weight.detach().clone().requires_grad_()
    ref.router.weight = torch.nn.Parameter(gate)
    outs, ref_x = [], [xi.clone().requires_grad_() for xi in xs]
    for r in range(4):
        y = [torch.zeros(HIDDEN) for _ in range(TOKENS)]
        for t, e, w in ref.slots(ref_x[r]):
            p = exact if processor(r, e) == e // LOCAL else copy
            h = F.gelu(ref_x[r][t] @ p["w1"][e].t() + p["b1"][e])
            y[t] = y[t] + w * (h @ p["w2"][e].t() + p["b2"][e])
        outs.append(torch.stack(y))
    sum((o * ri).sum() for o, ri in zip(outs, rs)).backward()
    first = rank * LOCAL
    scale = lambda w: max(1.0, w.abs().max().item())
    diffs = {"output": (out - outs[rank]).abs().max().item() / scale(outs[rank]),
             "input_grad": (x.grad - ref_x[rank].grad).abs().max().item() / scale(ref_x[rank].grad),
             "gate_grad": (layer.gate_weight.grad - ref.router.weight.grad).abs().max().item()
             / scale(ref.router.weight.grad)}
    diffs["expert_grad"] = max(
        (getattr(layer, n).grad - (exact[n].grad + copy[n].grad)[first:first + LOCAL]).abs().max().item()
        / scale(exact[n].grad + copy[n].grad) for n in NAMES)
    moved = max((copy[n] - full[n]).abs().max().item() for n in NAMES)
    return {"diffs": diffs, "copies_differ_by": moved, "codec_agrees": codec_agrees(full)}


def run_rank(rank):
    return {name: guarded(run_case, strategy, rank) for name, strategy in CASES}


def run_all(outdir: str):
    return run_on_ranks(run_rank, outdir)


if __name__ == "__main__":
    import tempfile
    for r, res in enumerate(run_all(tempfile.mkdtemp())):
        for name, v in res.items():
            print(r, name, v.get("diffs"), v.get("copies_differ_by"), v.get("error", "")[-800:])
