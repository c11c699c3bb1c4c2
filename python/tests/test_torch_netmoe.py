"""moecomm.torch.SampleMovingMoE (placement=netmoe) on 4 gloo processes: outputs and
gradients (after GradSync) equal the single-process block y = h + MoE(LN(h)) of
torch_netmoe_cases.py within 1e-5 (fp32, relative to the reference's magnitude), for one and
two nodes, chunks per phase, experts that wait, 2DH and 1DH, EDP replicas and two blocks in a row;
the placement is moecomm.place.solve's on the reference's counts; bad input raises
moecomm.Error on every rank. The schedule binding builds netmoe only from routed sizes."""
from __future__ import annotations

import pytest

from conftest import require

torch = require("torch")

import moecomm  # noqa: E402
from moecomm import _moecomm  # noqa: E402
import torch_netmoe_cases as cases  # noqa: E402
from torch_spawn import assert_matches_reference  # noqa: E402


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    return cases.run_all(str(tmp_path_factory.mktemp("torch_netmoe")))


@pytest.mark.parametrize("case", [c[0] for c in cases.CASES])
def test_block_equals_reference(results, case):
    for rank, res in enumerate(results):
        got = res["cases"][case]
        assert_matches_reference(got, rank, case)
        # The group's counts are the reference's, the placement is moecomm.place.solve's on
        # them and the samples held are the ones it put here; the aux op's per-home loads and
        # the moved targets are the reference's.
        for what, ok in got["checks"].items():
            assert ok, f"rank {rank} {case}: {what} differs"
        assert got["ops"] > 0
        # Every op ran and was timed beside the simulation (moecomm.torch.op_times).
        assert {"gate", "moe.netmoe.counts_allgather", "moe.netmoe.aux_allgather",
                "moe.netmoe.solve", "moe.dispatch.a2a", "moe.expert", "moe.combine.a2a"} \
            <= set(got["timed"])
        assert "placement=netmoe" in got["strategy"]


def test_samples_move(results):
    """The placement moves samples between ranks on one node and between nodes on two (the
    two-stage solve's first stage), so the moved paths are what the cases check."""
    moved = {c[0]: (results[0]["cases"][c[0]]["moved_ranks"],
                    results[0]["cases"][c[0]]["moved_nodes"]) for c in cases.CASES}
    assert moved["netmoe"][0] > 0 and moved["netmoe"][1] == 0
    for name in ("netmoe-2x2", "chunks-2", "chunks-3-2-wait", "2dh-xmoe-swiglu", "1dh",
                 "two-blocks"):
        assert moved[name][1] > 0, f"{name}: no sample changed node"


def test_cases_cover_the_knobs():
    strategies = " ".join(c[1] for c in cases.CASES)
    for knob in ("chunks=2", "chunks_fwd=3,chunks_bwd=2", "chunks_fwd=2,chunks_bwd=3",
                 "pipeline_experts=false", *(f"a2a={a}" for a in _moecomm.routed_a2a_algorithms()
                                             if a != "flat")):
        assert knob in strategies
    assert {c[4] for c in cases.CASES} == {"gshard", "sigmoid", "xmoe"}
    assert {c[5] for c in cases.CASES} == {"gelu", "swiglu"}


EXPECTED = {
    # Refusals from sched/executor_caps.h, the table `moecomm train` consults too.
    "not-netmoe": "SampleMovingMoE: strategy: placement: has no placement=netmoe, so "
                  "moecomm.torch.SampleMovingMoE binds none of its MoE ops "
                  "(moecomm.torch.MoELayer runs the strategies that keep samples home)",
    "expert-choice": "SampleMovingMoE: strategy: placement: placement=netmoe needs a "
                     "token-choice gate, not expert choice (expert choice drops tokens; the "
                     "residual rides on each token's first slot)",
    "tp": "SampleMovingMoE: strategy: tp: placement=netmoe runs with tp=1 only, got tp=2",
    "ep-1": "SampleMovingMoE: the layout has no expert-parallel A2A (ep must be > 1)",
    "hybrid": "SampleMovingMoE: strategy: moecomm.torch.SampleMovingMoE cannot bind "
              "moe.hybrid.expert_allgather [layer 0, forward, knob hybrid], "
              "moe.hybrid.grad_reducescatter [layer 0, backward, knob hybrid] "
              "(placement=netmoe moves whole samples over the EP group: no ESP split, no TP "
              "gather, no expert transfer)",
    "dedup": "strategy: a2a: a2a=dedup prices balanced routing over the experts' home ranks; "
             "it does not compose with placement=netmoe",
    "ffn-type": "ffn_type must be gelu or swiglu, got 'relu'",
    "samples": "samples must be a positive integer, got 0",
    "rank-2": "h must be this rank's samples [B, S, hidden], got (24, 16)",
    "hidden": "h's last dimension is 15, hidden is 16",
    "dtype": "h must be float32",
    "sample-ids-shape": "sample_ids must be [B] = [4] integers, got (5,)",
    "sample-ids-twice": "sample ids must be 0..15, each once (member * B + b at home); id 0 "
                        "is held 4 times",
    "batch-differs": "same number of samples and tokens per sample, got [B, S] = [4, 6], "
                     "[4, 6], [5, 6], [4, 6]",
    "targets-unbuilt": "targets move with the samples when the layer is built with vocab_size",
    "targets-missing": "built with vocab_size: pass this rank's home samples' targets [B, S]",
    "targets-shape": "targets must be [B, S] = [4, 6] integers, got (4, 7)",
}


@pytest.mark.parametrize("case", sorted(EXPECTED))
def test_error_names_the_problem(results, case):
    for rank, res in enumerate(results):
        got = res["errors"][case]
        assert got is not None, f"rank {rank}: {case} raised nothing"
        assert EXPECTED[case] in got, f"rank {rank}: {got}"


def test_every_error_case_is_checked():
    assert set(EXPECTED) == set(cases.ERRORS)


MODEL = {"name": "t", "hidden": 16, "ffn_hidden": 32, "experts": 8, "top_k": 2, "layers": 1,
         "heads": 16, "seq_len": 6, "micro_batch": 4, "capacity_factor": None,
         "dtype_bytes": 4}


def test_schedule_binding_builds_netmoe_from_routed_sizes():
    build = moecomm._moecomm.build_schedule
    names = lambda s: {o.name for o in s.ops(0)}
    netmoe = build(MODEL, cases.TWO_NODES, "ep=4", "netmoe")  # routing="auto": synthetic
    assert {"moe.netmoe.counts_allgather", "moe.netmoe.solve", "moe.netmoe.aux_allgather"} \
        <= names(netmoe)
    assert "moe.netmoe.targets_allgather" not in names(netmoe)
    headed = build(dict(MODEL, vocab_size=50), cases.TWO_NODES, "ep=4", "netmoe", lm_head=True)
    assert {"moe.netmoe.targets_allgather", "head"} <= names(headed)
    # Routed sizes reach the A2As: the synthetic routing's matrices are not uniform.
    a2a = next(o for o in netmoe.ops(0) if o.name == "moe.dispatch.a2a")
    pairs = netmoe.collective(a2a.collective).pair_bytes
    assert len(set(pairs)) > 1
    uniform = build(MODEL, cases.TWO_NODES, "ep=4", "baseline")
    a2a = next(o for o in uniform.ops(0) if o.name == "moe.dispatch.a2a")
    assert len(set(uniform.collective(a2a.collective).pair_bytes)) == 1
    with pytest.raises(moecomm.Error, match='placement=netmoe moves samples by their routing: '
                                            'use routing="synthetic"'):
        build(MODEL, cases.TWO_NODES, "ep=4", "netmoe", routing="uniform")
    with pytest.raises(moecomm.Error, match='routing: must be auto, uniform or synthetic, got '
                                            '"routed"'):
        build(MODEL, cases.TWO_NODES, "ep=4", "netmoe", routing="routed")
    with pytest.raises(moecomm.Error, match=r"locality: must be in \[0, 1\]"):
        build(MODEL, cases.TWO_NODES, "ep=4", "netmoe", locality=1.5)
    with pytest.raises(moecomm.Error, match="lm_head: needs the model's vocab_size"):
        build(MODEL, cases.TWO_NODES, "ep=4", "netmoe", lm_head=True)
