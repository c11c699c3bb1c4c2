"""Ranks built with different settings fail at construction, on every rank, naming the
setting and which ranks hold which value; consistent builds pass and still train."""
from __future__ import annotations

import pytest

from conftest import require

require("torch")

import moecomm  # noqa: E402
import torch_fingerprint  # noqa: E402
from moecomm.torch import fingerprint  # noqa: E402

ONE = "rank 0 has {}, ranks 1-3 have {}"
EXPECTED = {
    "strategy": "MoELayer: ranks disagree on strategy: a2a: " + ONE.format("2dh", "flat")
                + " (and on strategy: tp_dispatch, strategy: grad_sync, strategy: "
                  "grad_partitions)",
    "chunks": "MoELayer: ranks disagree on strategy: chunks_fwd: " + ONE.format(2, 1)
              + " (and on strategy: chunks_bwd)",
    "ep": "MoELayer: ranks disagree on ep: " + ONE.format(4, 2),
    "a2a": "MoELayer: ranks disagree on strategy: a2a: " + ONE.format("2dh", "flat"),
    "tp": "MoELayer: ranks disagree on tp: " + ONE.format(2, 1) + " (and on esp, dp)",
    "experts": "MoELayer: ranks disagree on experts: " + ONE.format(16, 8),
    "hidden": "MoELayer: ranks disagree on hidden: " + ONE.format(16, 32),
    "hidden-two": "MoELayer: ranks disagree on hidden: ranks 0-1 have 16, ranks 2-3 have 32",
    "ffn_hidden": "MoELayer: ranks disagree on ffn_hidden: " + ONE.format(64, 32),
    "ffn_type": "MoELayer: ranks disagree on ffn_type: " + ONE.format("swiglu", "gelu"),
    "top_k": "MoELayer: ranks disagree on top_k: " + ONE.format(1, 2),
    "capacity_factor": "MoELayer: ranks disagree on capacity_factor: "
                       + ONE.format(1.25, "none"),
    "gate": "MoELayer: ranks disagree on gate: " + ONE.format("sigmoid", "gshard"),
    "temperature": "MoELayer: ranks disagree on temperature: " + ONE.format(0.1, 0.07),
    "seed": "MoELayer: ranks disagree on seed: " + ONE.format(1, 0),
    "hybridep": "MoELayer: ranks disagree on strategy: expert_transfer: "
                + ONE.format("hybrid", "none"),
    "hybrid_domain": "MoELayer: ranks disagree on strategy: hybrid_domain: " + ONE.format(2, 4),
    "cluster": "MoELayer: ranks disagree on cluster: rank 0 has 2x2, hash de4623aeb5f6244a, "
               "ranks 1-3 have local-4, hash 5f42bf051795dbd2",
    "timeout": "MoELayer: ranks disagree on timeout: " + ONE.format("5.0 s", "none"),
    "unbuildable": "MoELayer: ranks disagree on schedule build: "
                   + ONE.format("failed", "succeeded"),
    "netmoe": "SampleMovingMoE: ranks disagree on hidden: " + ONE.format(32, 16),
    "netmoe-solver": "SampleMovingMoE: ranks disagree on solver: " + ONE.format("greedy", "flow"),
    "average": "GradSync: ranks disagree on average: " + ONE.format("true", "false"),
    "overlap": "GradSync: ranks disagree on overlap: " + ONE.format("false", "true"),
    "micro_batches": "GradSync: ranks disagree on micro_batches: " + ONE.format(4, "none"),
    "frozen": "GradSync: ranks disagree on layer 0: expert gradients: rank 0 has 3 tensors, "
              "2240 values, ranks 1-3 have 4 tensors, 4288 values",
}
# The rank whose schedule failed to build raises its own error.
UNBUILDABLE_RANK0 = "parallel (world 4): esp x ep x pp = 3 does not divide 4"
# Generous: the check is one AllGather (three when the ranks disagree).
SECONDS = 10.0


@pytest.fixture(scope="module")
def ranks(tmp_path_factory):
    return torch_fingerprint.run_all(str(tmp_path_factory.mktemp("torch_fingerprint")))


def test_every_case_is_expected():
    assert sorted(EXPECTED) == sorted(torch_fingerprint.CASES)


@pytest.mark.parametrize("case", sorted(EXPECTED))
def test_every_rank_names_the_setting(ranks, case):
    for rank, got in enumerate(ranks):
        want = UNBUILDABLE_RANK0 if (case, rank) == ("unbuildable", 0) else EXPECTED[case]
        assert got[case]["error"] == want, f"rank {rank}"
        assert got[case]["seconds"] < SECONDS, f"rank {rank}"


def test_consistent_builds_pass_and_train(ranks):
    for rank, got in enumerate(ranks):
        assert got["consistent"]["error"] is None, f"rank {rank}"
        assert got["train"]["error"] is None, f"rank {rank}"
        assert got["gate_grad"] == ranks[0]["gate_grad"], f"rank {rank}"
    assert any(g != 0 for g in ranks[0]["gate_grad"])


def test_rank_ranges():
    assert moecomm._moecomm.format_rank_ranges([0, 2, 3, 4, 7]) == "0, 2-4, 7"
    assert moecomm._moecomm.format_rank_ranges([5], "; ") == "5"


def test_disagreement_text():
    assert fingerprint.disagreement("gate", ["a", "b", "a", "c"]) == (
        "ranks disagree on gate: ranks 0, 2 have a, rank 1 has b, rank 3 has c")
    long = "x" * 49
    assert fingerprint.disagreement("v", [long, ""]) == (
        "ranks disagree on v: rank 0 has " + "x" * 32
        + f"... (hash {fingerprint.fnv1a(long) >> 32:08x}), rank 1 has ''")


def test_fnv1a_is_the_runtimes():
    # FNV-1a's published test vectors.
    assert fingerprint.fnv1a("") == 0xcbf29ce484222325
    assert fingerprint.fnv1a("a") == 0xaf63dc4c8601ec8c
