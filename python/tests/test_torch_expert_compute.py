"""moecomm.torch.expert_compute against torch autograd on the same FFNs: forward outputs,
input and parameter gradients to 1e-5 (fp32) for every way the experts' rows run (equal
counts as one batch, unequal ones padded into one batch, one GEMM per expert, experts with no
rows, no rows at all), both FFN types, with and without the output bias, keeping the
activations or recomputing them, and saved activations found again by a backward that cuts
the rows otherwise."""
from __future__ import annotations

import numpy as np
import pytest

from conftest import require

torch = require("torch")

from moecomm.torch import expert_compute as ec  # noqa: E402
from moecomm.torch.experts import expert_rows as reference_expert  # noqa: E402

HIDDEN, FFN = 6, 10


def params(ffn_type, experts, seed=0):
    gen = torch.Generator().manual_seed(seed)
    r = lambda *s: torch.rand(*s, generator=gen) - 0.5
    if ffn_type == "gelu":
        return [r(experts, FFN, HIDDEN), r(experts, FFN), r(experts, HIDDEN, FFN), r(experts, HIDDEN)]
    return [r(experts, FFN, HIDDEN), r(experts, FFN, HIDDEN), r(experts, HIDDEN, FFN)]


def reference(ffn_type, ps, sizes, x, dy, output_bias):
    """Autograd through moecomm.torch.experts.expert_rows, one expert at a time."""
    leaves = [p.clone().requires_grad_() for p in ps]
    xs = x.clone().requires_grad_()
    outs, at = [], 0
    for l, s in enumerate(sizes):
        outs.append(reference_expert(ffn_type, l, xs[at:at + s], leaves, output_bias))
        at += s
    y = torch.cat(outs) if outs else x.new_zeros((0, HIDDEN))
    grads = torch.autograd.grad(y, [xs, *leaves], dy, allow_unused=True)
    return y.detach(), grads[0], [g if g is not None else torch.zeros_like(p)
                                  for g, p in zip(grads[1:], ps)]


def batches(sizes):
    padded = ec.padded_rows(sizes)
    if padded is None:
        return ec.Batches(sizes, None)
    most, real = padded
    fill = ec.pad_positions(len(sizes) * most, real)
    return ec.Batches(sizes, (most, torch.from_numpy(real), torch.from_numpy(fill)))


def run(bank, b, x, dy, grads, saved=None, recompute=False):
    """Forward (unless ``saved``) and backward through the GEMMs' layout, whose pad rows get
    garbage inputs and output gradients: the backward must zero the latter itself."""
    def compute(t):
        t = b.to_compute(t)
        if b.fill is not None:
            t[b.fill] = 7.0
        return t
    y = None
    if saved is None:
        y, saved = bank.forward(compute(x), b, keep=not recompute)
        y = b.from_compute(y)
    if recompute:
        saved = bank.recompute(saved[0], b)
    return y, saved, b.from_compute(bank.backward(compute(dy), b, saved, grads))


SIZES = {
    "equal": [4, 4, 4],
    "padded": [3, 5, 0, 4],
    "per-expert": [1, 9, 0, 2],  # padding past MOST_PADDING
    "one-expert": [7],
    "no-rows": [0, 0, 0],
}


def test_batching_modes_are_the_ones_named():
    assert batches(SIZES["equal"]).pad is None and len(batches(SIZES["equal"]).parts) == 1
    assert batches(SIZES["padded"]).pad is not None
    per_expert = batches(SIZES["per-expert"])
    assert per_expert.pad is None and [p[0] for p in per_expert.parts] == [0, 1, 3]
    assert batches(SIZES["no-rows"]).parts == []


@pytest.mark.parametrize("ffn_type", ["gelu", "swiglu"])
@pytest.mark.parametrize("name", list(SIZES))
@pytest.mark.parametrize("output_bias", [True, False])
@pytest.mark.parametrize("recompute", [False, True])
def test_forward_and_backward_equal_autograd(ffn_type, name, output_bias, recompute):
    sizes = SIZES[name]
    ps = params(ffn_type, len(sizes))
    gen = torch.Generator().manual_seed(1)
    x = torch.rand(sum(sizes), HIDDEN, generator=gen) - 0.5
    dy = torch.rand(sum(sizes), HIDDEN, generator=gen) - 0.5
    want_y, want_dx, want_grads = reference(ffn_type, ps, sizes, x, dy, output_bias)
    bank = ec.ExpertBank(ffn_type, ps, output_bias)
    b = batches(sizes)
    grads = [torch.zeros_like(p) for p in ps]
    _, kept = bank.forward(b.to_compute(x), b, keep=not recompute)
    assert len(kept) == (1 if recompute else (3 if ffn_type == "gelu" else 4))
    y, _, dx = run(bank, b, x, dy, grads, recompute=recompute)
    torch.testing.assert_close(y, want_y, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(dx, want_dx, atol=1e-5, rtol=1e-5)
    for g, w in zip(grads, want_grads):
        torch.testing.assert_close(g, w, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("ffn_type", ["gelu", "swiglu"])
def test_backward_cut_otherwise_finds_the_saved_rows(ffn_type):
    """Forward: two expert ops (chunks) over rows with canonical ids; backward: one op over
    all of them in another order. Gradients equal one autograd pass over all rows."""
    experts, rows = 3, 17
    ps = params(ffn_type, experts)
    gen = torch.Generator().manual_seed(2)
    expert_of = torch.randint(0, experts, (rows,), generator=gen)
    expert_of[:3] = torch.tensor([0, 1, 2])
    x = torch.rand(rows, HIDDEN, generator=gen) - 0.5
    dy = torch.rand(rows, HIDDEN, generator=gen) - 0.5
    order = torch.sort(expert_of, stable=True).indices
    sizes = torch.bincount(expert_of, minlength=experts).tolist()
    want_y, want_dx, want_grads = reference(ffn_type, ps, sizes, x[order], dy[order], True)
    # Canonical id of a row: its place in the expert-sorted order.
    canonical = np.arange(rows)
    chunk = np.arange(rows) % 2  # two forward chunks, each sorted by expert
    bank = ec.ExpertBank(ffn_type, ps, True)
    saved = ec.SavedActivations(rows)
    e = expert_of[order].numpy()
    for c in (0, 1):
        ids = canonical[chunk == c]
        op_sizes = np.bincount(e[ids], minlength=experts).tolist()
        b = batches(op_sizes)
        y, keep = bank.forward(b.to_compute(x[order][ids]), b, keep=True)
        torch.testing.assert_close(b.from_compute(y), want_y[ids], atol=1e-5, rtol=1e-5)
        saved.add(ids, b, keep)
    grads = [torch.zeros_like(p) for p in ps]
    b = batches(sizes)
    _, _, dx = run(bank, b, x, dy[order], grads, saved=saved.take(canonical, b))
    torch.testing.assert_close(dx, want_dx, atol=1e-5, rtol=1e-5)
    for g, w in zip(grads, want_grads):
        torch.testing.assert_close(g, w, atol=1e-5, rtol=1e-5)
