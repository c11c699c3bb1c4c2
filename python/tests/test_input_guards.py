"""Inputs that once crashed the interpreter, wrapped a 64-bit total or slipped through as
NaN or a TypeError: each raises moecomm.Error naming the argument."""
from __future__ import annotations

import math
import re

import numpy as np
import pytest

import moecomm
from moecomm import place

FAST = {"budget_s": 0}
MODEL = {"name": "m", "hidden": 1024, "ffn_hidden": 4096, "experts": 8, "top_k": 2,
         "layers": 2, "heads": 8, "seq_len": 512, "micro_batch": 2, "capacity_factor": None,
         "dtype_bytes": 2}


def test_a_dict_inside_itself_is_refused():
    model = dict(MODEL)
    model["parallel"] = {"dp": 2}
    model["parallel"]["again"] = model
    with pytest.raises(moecomm.Error, match=r"^model: parallel: again: contains itself"):
        moecomm.plan(model, **FAST)
    loop: list = [1]
    loop.append(loop)
    with pytest.raises(moecomm.Error, match=r"^cluster: levels\[1\]: contains itself"):
        moecomm.simulate(cluster={"name": "c", "levels": loop})


def test_a_list_nested_100000_deep_is_refused():
    deep: list = []
    for _ in range(100_000):
        deep = [deep]
    with pytest.raises(moecomm.Error,
                       match=r"^model: description(\[0\])+: nested deeper than 64 levels"):
        moecomm.plan(dict(MODEL, description=deep), **FAST)


def test_a_value_shared_by_two_keys_is_not_a_self_reference():
    curve = [[8e6, 0.5], [256e6, 0.8]]
    cluster = {"name": "c", "levels": [
        {"name": "node", "count": 2, "bandwidth_GBps": 25, "latency_us": 10},
        {"name": "gpu", "count": 4, "bandwidth_GBps": 200, "latency_us": 3}],
        "device": {"tflops": 312, "memory_GB": 80, "memory_bandwidth_GBps": 1600},
        "efficiency": {"node": {"alltoall": curve, "allgather": curve}}}
    assert moecomm.simulate(MODEL, cluster).iteration_ms > 0


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf, np.float32("nan")])
def test_non_finite_numbers_in_dicts_are_refused(value):
    with pytest.raises(moecomm.Error, match=r"^model: capacity_factor: must be a finite number"):
        moecomm.plan(dict(MODEL, capacity_factor=value), **FAST)


@pytest.mark.parametrize("call, name", [
    (lambda: moecomm.simulate(compute_efficiency=math.nan), "compute_efficiency"),
    (lambda: moecomm.simulate(completion_tolerance=math.inf), "completion_tolerance"),
    (lambda: moecomm.simulate(locality=math.nan, routing="synthetic"), "locality"),
    (lambda: moecomm.plan(budget_s=math.nan), "budget_s"),
])
def test_non_finite_arguments_are_refused(call, name):
    with pytest.raises(moecomm.Error, match=f"^{name}: must be a finite number"):
        call()


def test_sizes_whose_product_passes_a_petabyte_are_refused():
    # Each within its range; one micro-batch's dispatch would be 5.9e18 bytes (the default
    # model, once wrapped to -9223372036854775808) and 4.1e17 (MODEL).
    huge = dict(MODEL, seq_len=100_000_000, micro_batch=1_000_000)
    for call, bytes_ in ((lambda: moecomm.plan(seq_len=100_000_000, micro_batch=1_000_000),
                          "5.9e+18"), (lambda: moecomm.simulate(huge), "4.1e+17")):
        with pytest.raises(moecomm.Error, match=re.escape(
                "(seq_len x micro_batch x top_k x hidden x dtype_bytes")) as e:
            call()
        assert f"would be {bytes_} bytes, more than 1e+15 (1 PB): reduce seq_len or " \
               "micro_batch" in str(e.value)
    with pytest.raises(moecomm.Error, match=r"^model: one micro-batch's dispatch"):
        moecomm.plan(dict(MODEL, hidden=1_000_000, heads=8, seq_len=100_000_000,
                          micro_batch=1000), **FAST)


@pytest.mark.parametrize("solver", place.solvers())
def test_assign_refuses_costs_whose_sums_overflow(solver):
    cost = np.full((4, 2), 2 ** 61, dtype=np.int64)  # the optimum alone is 2^63
    with pytest.raises(moecomm.Error, match=rf"^cost\[0\]\[0\]: {2 ** 61} is outside .*"
                                            rf"solver {solver} sums exactly"):
        place.assign(cost, [2, 2], solver)
    cost[:] = 5
    assert place.assign(cost, [2, 2], solver)[1] == 20


def test_cost_scaling_gets_its_own_tighter_bound():
    rng = np.random.default_rng(0)
    cost = rng.integers(0, 2 ** 52, size=(256, 8), dtype=np.int64)
    with pytest.raises(moecomm.Error, match="solver lemon-cs sums exactly for 256 rows and 8 bins"):
        place.assign(cost, [32] * 8, "lemon-cs")
    # Scaled down, within the flow solver's range (2^58 / 265), then within lemon-cs's.
    mid = cost >> 3
    assert place.assign(mid, [32] * 8, "flow")[1] == place.assign(mid, [32] * 8, "km")[1]
    small = cost >> 14
    assert place.assign(small, [32] * 8, "lemon-cs")[1] == place.assign(small, [32] * 8)[1]


def test_placer_refuses_counts_whose_sums_overflow():
    num = np.zeros((4, 2), dtype=np.int64)
    num[1] = [2 ** 62, 2 ** 62]
    with pytest.raises(moecomm.Error, match=r"^num\[1\]: the sample's tokens sum past"):
        place.solve(num, [0, 1], 2)
    with pytest.raises(moecomm.Error, match=r"^num\[1\]"):
        place.AsyncSamplePlacer([0, 1], 2).submit(num)
    with pytest.raises(moecomm.Error, match=r"^num\[1\]"):  # its costs would wrap
        place.node_stage_problem(num, [0, 1], 2)


def test_zero_is_not_taken_for_the_default():
    with pytest.raises(moecomm.Error, match=r"^seq_len: must be at least 1"):
        moecomm.plan(seq_len=0, **FAST)
    with pytest.raises(moecomm.Error, match=r"^micro_batch: must be at least 1"):
        moecomm.plan(micro_batch=0, **FAST)
    with pytest.raises(moecomm.Error, match=r"^compute_efficiency: must be in \[0.01, 1\]"):
        moecomm.simulate(compute_efficiency=0.0)


@pytest.mark.parametrize("call, name", [
    (lambda: moecomm.plan(seq_len="long"), "seq_len"),
    (lambda: moecomm.plan(micro_batch=2.5), "micro_batch"),
    (lambda: moecomm.plan(layers=None), "layers"),
    (lambda: moecomm.plan(layers=2 ** 40), "layers"),
    (lambda: moecomm.plan(budget_s="1"), "budget_s"),
    (lambda: moecomm.plan(zero=True), "zero"),
    (lambda: moecomm.plan(recompute=1), "recompute"),
    (lambda: moecomm.simulate(strategy=7), "strategy"),
    (lambda: moecomm.simulate(layers=1.0), "layers"),
    (lambda: moecomm.simulate(compute_efficiency="high"), "compute_efficiency"),
    (lambda: moecomm.simulate(completion_tolerance=None), "completion_tolerance"),
    (lambda: moecomm.simulate(fairness=1), "fairness"),
    (lambda: moecomm.simulate(routing=None), "routing"),
    (lambda: moecomm.simulate(locality="0.9"), "locality"),
    (lambda: moecomm.simulate(trace=1), "trace"),
    (lambda: moecomm.presets(None), "presets"),
    (lambda: place.SamplePlacer([0, 1], "2"), "devices_per_node"),
    (lambda: place.SamplePlacer([0, 1], 2, devices=4.0), "devices"),
    (lambda: place.AsyncSamplePlacer([0, 1], 2, solver=None), "solver"),
    (lambda: place.solve(np.ones((4, 2), dtype=np.int64), [0, 1], 2 ** 33), "devices_per_node"),
    (lambda: place.node_stage_problem(np.ones((4, 2), dtype=np.int64), [0, 1], None),
     "devices_per_node"),
    (lambda: place.assign(np.ones((2, 2), dtype=np.int64), [1, 1], solver=3), "solver"),
    (lambda: place.assign({"a": 1}, [1, 1]), "cost"),
    (lambda: place.assign(np.ones((2, 2), dtype=np.int64), "xy"), "capacity"),
    (lambda: moecomm.plan(**FAST).row(0), "name"),
])
def test_wrong_types_raise_error_naming_the_argument(call, name):
    with pytest.raises(moecomm.Error, match=f"^{name}"):
        call()
