"""The experts' backward in moecomm.torch is linear in local experts: one backward of
MoELayer and of SampleMovingMoE (2 chunks each way) computes tensors of a stacked expert
weight's shape [local experts, ...] a fixed number of times (its zeroed gradient, netmoe's
copy into .grad, and MoELayer's batched GEMM accumulating into the whole stack at most once
per chunk), the same at 8 local experts as at 32. Differentiating each
(chunk, local expert) against the whole stack made a zero-filled stack per expert and added
it in full (MoELayer here: 2 + 8 per local expert)."""
from __future__ import annotations

import pytest

from conftest import require

torch = require("torch")

import torch_grad_counts as counts  # noqa: E402


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    return counts.run_all(str(tmp_path_factory.mktemp("torch_expert_grads")))


# Per stacked 3-D weight (w1, w2): its zeroed gradient; SampleMovingMoE's block still holds
# the gradients it returns, so autograd copies each into .grad (an empty tensor, a copy_).
EXPECTED = {"layer": {"aten.zeros_like.default": 2},
            "netmoe": {"aten.zeros_like.default": 2, "aten.new_empty_strided.default": 2,
                       "aten.copy_.default": 2}}


@pytest.mark.parametrize("kind", sorted(counts.STRATEGIES))
@pytest.mark.parametrize("experts", counts.EXPERTS)
def test_backward_makes_each_stacked_gradient_once(results, kind, experts):
    for rank, res in enumerate(results):
        got = res[f"{kind}-{experts}"]
        assert "error" not in got, f"rank {rank}: {got.get('error')}"
        if kind == "layer":  # experts batched together: one accumulation per (chunk, weight)
            assert got.pop("aten.baddbmm_.default", 0) <= 2 * 2, (rank, experts, got)
        assert got == EXPECTED[kind], f"rank {rank} {kind} at {experts} experts: {got}"
