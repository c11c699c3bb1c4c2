"""The bound Schedule says whether its backward recomputes the experts' forward
(sched::Strategy::recompute_experts), for the executors to read: off by default and in every
paper method, on where the strategy sets it, and priced at 3x the forward's flops per backward
expert op (2x without it)."""
from __future__ import annotations

import pytest

import moecomm
from moecomm import _moecomm

MODEL = {"name": "rc", "hidden": 8, "ffn_hidden": 12, "experts": 8, "top_k": 2, "layers": 1,
         "heads": 8, "seq_len": 6, "micro_batch": 1, "capacity_factor": None, "dtype_bytes": 4,
         "compute_dtype": "fp32"}
TWO_NODES = {"name": "2x2", "levels": [
    {"name": "node", "count": 2, "bandwidth_GBps": 1, "latency_us": 20},
    {"name": "gpu", "count": 2, "bandwidth_GBps": 10, "latency_us": 5}],
    "device": {"tflops": 1, "memory_GB": 16, "memory_bandwidth_GBps": 50}}
METHODS = ["baseline", "hier-a2a", "monta-o1", "monta-o2", "monta-o3", "fsmoe", "lina",
           "hybridep", "netmoe"]


def build(strategy: str):
    return _moecomm.build_schedule(MODEL, TWO_NODES, "ep=4", strategy)


@pytest.mark.parametrize("method", METHODS)
def test_off_by_default_in_every_method(method):
    s = build(method)
    assert s.recompute_experts is False
    assert "recompute_experts=false" in s.strategy


@pytest.mark.parametrize("method", ["baseline", "lina", "hybridep"])
def test_on_where_the_strategy_sets_it(method):
    s = build("base=" + method + ",recompute_experts=true")
    assert s.recompute_experts is True
    assert "recompute_experts=true" in s.strategy
    assert build("base=" + method + ",recompute_experts=false").recompute_experts is False


def test_read_only():
    with pytest.raises(AttributeError):
        build("baseline").recompute_experts = True


def test_backward_expert_ops_carry_the_forward_once_more():
    expert = _moecomm.OpRole.expert
    for strategy in ["base=baseline", "base=baseline,chunks=2"]:
        kept = [o for o in build(strategy).ops(0) if o.role == expert]
        recomputed = [o for o in build(strategy + ",recompute_experts=true").ops(0)
                      if o.role == expert]
        forward = {o.chunk: o.flops for o in kept if o.phase == "forward"}
        assert len(kept) == len(recomputed) == 2 * len(forward)
        for off, on in zip(kept, recomputed):
            if off.phase == "forward":
                assert on.flops == off.flops
            else:
                assert off.flops == 2 * forward[off.chunk]
                assert on.flops == 3 * forward[off.chunk]


def test_bad_value_is_an_error_naming_the_knob():
    with pytest.raises(moecomm.Error, match="recompute_experts: unknown value \"on\""):
        build("recompute_experts=on")
