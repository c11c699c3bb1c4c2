"""moecomm.torch's errors name what is wrong (moecomm.Error, a ValueError), on every rank."""
from __future__ import annotations

import pytest

from conftest import require

require("torch")

import torch_errors  # noqa: E402

EXPECTED = {
    # Refusals from sched/executor_caps.h: the ops the layer cannot bind, by role and knob.
    "hybrid-esp": "MoELayer: strategy: moecomm.torch.MoELayer cannot bind "
                  "moe.combine.esp_allreduce [layer 0, forward, knob esp], "
                  "moe.combine.esp_allreduce [layer 0, backward, knob esp] "
                  "(expert_transfer=hybrid runs without ESP here (esp = 1))",
    "netmoe": "MoELayer: strategy: moecomm.torch.MoELayer cannot bind "
              "moe.netmoe.counts_allgather [layer 0, forward, knob netmoe], "
              "moe.netmoe.aux_allgather [layer 0, forward, knob netmoe], moe.netmoe.solve "
              "[layer 0, forward, knob netmoe] (placement=netmoe moves samples: use "
              "moecomm.torch.SampleMovingMoE)",
    "unknown-gate": "gate must be one of gshard, sigmoid, xmoe, expert-choice, got 'topk'",
    "gate-spelling": "got 'expert_choice'; did you mean 'expert-choice'?",
    "ffn-type": "ffn_type must be gelu or swiglu, got 'relu'",
    "experts-split": "ep = 4 does not divide the number of experts (6)",
    "world": "the layout has 8 ranks but torch.distributed's world has 4",
    "strategy": "did you mean 'chunks'",
    "strategy-type": "strategy must be a string",
    "hidden": "input's last dimension is 15, hidden is 16",
    "grad-sync": "give at least one MoELayer",
    "temperature-zero": "MoELayer: temperature must be a finite number > 0 (the xmoe gate "
                        "divides its scores by it), got 0",
    "temperature-negative": "temperature must be a finite number > 0 (the xmoe gate divides "
                            "its scores by it), got -0.5",
    "temperature-nan": "temperature must be a finite number > 0 (the xmoe gate divides its "
                       "scores by it), got nan",
    "temperature-netmoe": "SampleMovingMoE: temperature must be a finite number > 0",
    "type-hidden": "MoELayer: hidden: must be an integer, got a str",
    "type-seed": "MoELayer: seed: must be an integer, got a float",
    "type-capacity": "MoELayer: capacity_factor: must be a number, got a str",
    "type-netmoe-eps": "SampleMovingMoE: eps: must be a number, got a str",
    "netmoe-xmoe-dim": "SampleMovingMoE: xmoe_dim must be a positive integer, got 0",
    # The token rows' wire dtype: moecomm.torch sends fp32 only (sched/executor_caps.h).
    "a2a-dtype-fp8": "MoELayer: strategy: a2a_dtype: a2a_dtype=fp8: moecomm.torch sends token "
                     "rows as fp32 (it has no bf16 wire path, and no fp8 one: torch has no "
                     "float8 dtype before 2.1)",
    "a2a-dtype-bf16": "MoELayer: strategy: a2a_dtype: a2a_dtype=bf16: moecomm.torch sends token "
                      "rows as fp32",
    "a2a-dtype-netmoe": "SampleMovingMoE: strategy: a2a_dtype: a2a_dtype=fp8/bf16: "
                        "moecomm.torch sends token rows as fp32",
}


@pytest.fixture(scope="module")
def errors(tmp_path_factory):
    return torch_errors.run_all(str(tmp_path_factory.mktemp("torch_errors")))


@pytest.mark.parametrize("case", sorted(EXPECTED))
def test_error_names_the_problem(errors, case):
    for rank, got in enumerate(errors):
        assert got[case] is not None, f"rank {rank}: {case} raised nothing"
        assert EXPECTED[case] in got[case], f"rank {rank}: {got[case]}"


def test_plan_row_gives_its_strategy(errors):
    for got in errors:
        assert "name=fsmoe-custom" in got["plan-row-strategy"]
        assert "chunks_fwd=2,chunks_bwd=2" in got["plan-row-strategy"]


def test_uninitialized_torch_distributed():
    import moecomm
    import moecomm.torch as mt
    with pytest.raises(moecomm.Error, match="not initialized"):
        mt.MoELayer(16, 32, 8)
