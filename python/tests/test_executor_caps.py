"""The MPI runtime (`moecomm train`) and moecomm.torch refuse strategies from one table
(sched/executor_caps.h, bound as Schedule.refusal): over a grid of strategies, tp,
placement and expert transfer, both refuse the same combinations, except the runtime-only
rules listed in ONLY_RT."""
from __future__ import annotations

import itertools

import pytest

from moecomm import Error, _moecomm

MODEL = {"name": "t", "hidden": 16, "ffn_hidden": 32, "experts": 8, "top_k": 2, "layers": 1,
         "heads": 16, "seq_len": 8, "micro_batch": 4, "capacity_factor": None, "dtype_bytes": 4}
CLUSTER = {"name": "2x2", "levels": [
    {"name": "node", "count": 2, "bandwidth_GBps": 1, "latency_us": 20},
    {"name": "gpu", "count": 2, "bandwidth_GBps": 10, "latency_us": 5}],
    "device": {"tflops": 1, "memory_GB": 16, "memory_bandwidth_GBps": 50}}

BASES = ("baseline", "hier-a2a", "monta-o1", "monta-o3", "fsmoe", "lina")
PARALLEL = ("ep=4", "tp=2,ep=2,esp=2", "tp=2,ep=2,esp=1")
EXTRA = ("", "chunks=2,pipeline_experts=false")


def torch_executor(netmoe: bool) -> str:
    """The torch module a user picks: SampleMovingMoE runs placement=netmoe, MoELayer the rest."""
    return "torch_sample_moving" if netmoe else "torch_layer"


def strategy(base: str, netmoe: bool, hybrid: bool, extra: str) -> str:
    knobs = [f"base={base}"] + (["placement=netmoe"] if netmoe else []) \
        + (["expert_transfer=hybrid"] if hybrid else []) + ([extra] if extra else [])
    return ",".join(knobs)


def build(text: str, parallel: str):
    try:
        return _moecomm.build_schedule(MODEL, CLUSTER, parallel, text)
    except Error:
        return None  # the schedule builder refuses it for every executor alike


# Where the executors differ, and why: the runtime's HybridEP (HybridRemap, its expert codec)
# addresses the EP members of a tp=1 layout and receives its expert copies once per step,
# before the first pipelined chunk; moecomm.torch runs HybridEP beside TP replicas (esp = 1)
# and its runner runs the experts after all chunks alike.
ONLY_RT = {
    ("strategy: tp", "expert_transfer=hybrid runs with tp=1 only for now, got tp=2"),
    ("strategy: chunks", "expert_transfer=hybrid pipelines its chunks through the experts only "
                         "(pipeline_experts=true)"),
}


def grid():
    for base, parallel, netmoe, hybrid, extra in itertools.product(
            BASES, PARALLEL, (False, True), (False, True), EXTRA):
        yield strategy(base, netmoe, hybrid, extra), parallel, netmoe


def test_the_runtime_and_torch_refuse_the_same_combinations_but_the_documented_ones():
    built = differ = both = 0
    for text, parallel, netmoe in grid():
        s = build(text, parallel)
        if s is None:
            continue
        built += 1
        rt = s.refusal("rt")
        torch = s.refusal(torch_executor(netmoe))
        if (rt is None) != (torch is None):
            assert torch is None and rt in ONLY_RT, (text, parallel, rt, torch)
            differ += 1
        both += rt is not None and torch is not None
        for r in (rt, torch):
            assert r is None or r[0].startswith("strategy"), (text, parallel, r)
    # The grid reaches every kind of answer: some run, some are refused by both, some differ.
    assert built > 100 and both > 10 and differ > 0


def test_the_grid_meets_every_rule_it_can():
    """Each semantic rule of the grid's knobs, and the executors' reasons for unbound ops (the
    runtime's ESP ops under HybridEP come with tp > 1, which its tp rule refuses first)."""
    seen = set()
    for text, parallel, netmoe in grid():
        s = build(text, parallel)
        for executor in ("rt", "torch_layer", "torch_sample_moving"):
            r = s.refusal(executor) if s is not None else None
            if r is not None:
                seen.add(r[0] if r[0] != "strategy" else r[1].split(" (", 1)[1])
    assert seen == {
        "strategy: tp", "strategy: chunks", "strategy: placement",
        "placement=netmoe moves samples: use moecomm.torch.SampleMovingMoE)",
        "expert_transfer=hybrid runs without ESP here (esp = 1))",
        "placement=netmoe moves whole samples over the EP group: no ESP split, no TP gather, "
        "no expert transfer)"}


def test_refusals_name_the_op_roles_and_knobs():
    s = build("base=baseline,placement=netmoe,expert_transfer=hybrid", "ep=4")
    expected = ("the schedule runtime cannot bind moe.hybrid.expert_allgather [layer 0, "
                "forward, knob hybrid], moe.hybrid.grad_reducescatter [layer 0, backward, knob "
                "hybrid] (placement=netmoe moves whole samples over the EP group: no ESP split, "
                "no TP gather, no expert transfer)")
    assert s.refusal("rt") == ("strategy", expected)
    assert s.refusal("torch_sample_moving") == (
        "strategy", expected.replace("the schedule runtime", "moecomm.torch.SampleMovingMoE"))
    R = _moecomm.OpRole
    assert s.unbound_ops("rt") == [
        {"role": R.hybrid_expert_allgather, "layer": 0, "phase": "forward", "knob": "hybrid"},
        {"role": R.hybrid_grad_reducescatter, "layer": 0, "phase": "backward",
         "knob": "hybrid"}]
    esp = build("hybridep", "tp=2,ep=2,esp=2")
    assert esp.refusal("torch_layer") == (
        "strategy", "moecomm.torch.MoELayer cannot bind moe.combine.esp_allreduce [layer 0, "
                    "forward, knob esp], moe.combine.esp_allreduce [layer 0, backward, knob esp] "
                    "(expert_transfer=hybrid runs without ESP here (esp = 1))")
    assert esp.refusal("rt") == ("strategy: tp", "expert_transfer=hybrid runs with tp=1 only "
                                                 "for now, got tp=2")


def test_semantic_rules_take_the_runs_facts():
    s = build("netmoe", "ep=4")
    assert s.refusal("rt") is None and s.refusal("torch_sample_moving") is None
    gate = ("strategy: placement", "placement=netmoe needs a token-choice gate, not expert "
            "choice (expert choice drops tokens; the residual rides on each token's first slot)")
    assert s.refusal("rt", token_choice_gate=False) == gate
    assert s.refusal("torch_sample_moving", token_choice_gate=False) == gate
    assert s.refusal("rt", capacity_factor=1.5) == (
        "strategy: placement", "placement=netmoe inlines the expert residual, which needs the "
                               "dropless layout (capacity_factor 0, got 1.500000)")


def test_an_unknown_executor_is_refused_by_name():
    with pytest.raises(Error, match="executor: 'torch' is not rt, torch_layer or "
                                    "torch_sample_moving"):
        build("baseline", "ep=4").refusal("torch")


def test_a2a_dtype_reaches_the_codecs_and_the_executors_refuse_it_by_name():
    """The token A2As carry the knob's dtype per direction; the runtime sends fp32 and bf16,
    moecomm.torch fp32 only, and neither sends fp8 (the simulator prices it)."""
    s = _moecomm.build_schedule(MODEL, CLUSTER, "ep=4", "a2a_dtype=fp8/bf16")
    assert s.a2a_dtype == "fp8/bf16"
    dtypes = {}
    for op in s.ops(0):
        if op.collective >= 0:
            dtypes.setdefault(op.role, set()).add(s.collective(op.collective).codec.dtype)
    assert dtypes[_moecomm.OpRole.dispatch_a2a] == {"fp8"}
    assert dtypes[_moecomm.OpRole.combine_a2a] == {"bf16"}
    assert s.refusal("rt") == (
        "strategy: a2a_dtype", "a2a_dtype=fp8/bf16: the schedule runtime sends token rows as "
        "fp32 or bf16 (MPI has no fp8 type); the simulator prices fp8")
    refused = s.refusal("torch_layer")
    assert refused is not None and refused[0] == "strategy: a2a_dtype"
    assert "torch has no float8 dtype" in refused[1]
    bf16 = _moecomm.build_schedule(MODEL, CLUSTER, "ep=4", "a2a_dtype=bf16")
    assert bf16.refusal("rt") is None
    assert bf16.refusal("torch_layer")[0] == "strategy: a2a_dtype"
    plain = _moecomm.build_schedule(MODEL, CLUSTER, "ep=4", "baseline")
    assert plain.a2a_dtype is None
    assert plain.refusal("rt") is None and plain.refusal("torch_layer") is None
    with pytest.raises(Error, match="a2a_dtype: unknown wire dtype \"fp16\""):
        _moecomm.build_schedule(MODEL, CLUSTER, "ep=4", "a2a_dtype=fp16")
