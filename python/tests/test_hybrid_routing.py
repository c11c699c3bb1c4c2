"""HybridEP's token routing as moecomm.torch asks it of the core (sched/hybrid_routing.h): the
numbers of tests/sched/hybrid_routing_test.cpp, and its errors as moecomm.Error."""
from __future__ import annotations

import pytest

import moecomm
from moecomm import _moecomm

# 2 nodes x 4 GPUs with domains {2, 1}: domains {0, 4}, {1, 5}, {2, 6}, {3, 7}.
ORDER = [0, 4, 1, 5, 2, 6, 3, 7]


def test_rows_go_to_each_domains_member_at_the_senders_offset():
    assert _moecomm.hybrid_destinations(8, 2, ORDER, 5) == [4, 5, 6, 7]
    assert _moecomm.hybrid_destinations(8, 2, ORDER, 0) == [0, 1, 2, 3]
    assert _moecomm.hybrid_destinations(6, 3, [], 4) == [1, 4]
    assert _moecomm.hybrid_destinations(4, 1, [], 2) == [0, 1, 2, 3]


def test_layouts_that_do_not_split_are_errors():
    with pytest.raises(moecomm.Error, match="hybrid_domain=3 must divide the EP group's 4 ranks"):
        _moecomm.hybrid_destinations(4, 3, [], 0)
    with pytest.raises(moecomm.Error, match="no permutation"):
        _moecomm.hybrid_destinations(4, 2, [0, 0, 1, 2], 0)


# The model moecomm.torch's MoELayer builds its schedule for (fp32 on the wire).
MODEL = {"name": "sr", "hidden": 8, "ffn_hidden": 12, "experts": 8, "top_k": 2, "layers": 1,
         "heads": 8, "seq_len": 6, "micro_batch": 1, "capacity_factor": None, "dtype_bytes": 4,
         "compute_dtype": "fp32"}
TWO_NODES = {"name": "2x2", "levels": [
    {"name": "node", "count": 2, "bandwidth_GBps": 1, "latency_us": 20},
    {"name": "gpu", "count": 2, "bandwidth_GBps": 10, "latency_us": 5}],
    "device": {"tflops": 1, "memory_GB": 16, "memory_bandwidth_GBps": 50}}


def codecs(strategy: str, role) -> list:
    s = _moecomm.build_schedule(MODEL, TWO_NODES, "ep=4", strategy)
    return [s.collective(o.collective).codec for o in s.ops(0) if o.role == role]


def test_expert_allgather_carries_the_sr_codec_the_executors_run():
    R = _moecomm.OpRole
    [sr] = codecs("base=hybridep,hybrid_domain=2,compression=0.02", R.hybrid_expert_allgather)
    assert (sr.dtype, sr.compression, sr.shared_reference, sr.error_feedback) == \
        ("fp32", 0.02, True, False)
    [fb] = codecs("base=hybridep,hybrid_domain=2,compression=0.3,sr_feedback=true,"
                  "shared_expert=false", R.hybrid_expert_allgather)
    assert (fb.compression, fb.shared_reference, fb.error_feedback) == (0.3, False, True)
    [dense] = codecs("base=hybridep,hybrid_domain=2,compression=1,sr_feedback=true",
                     R.hybrid_expert_allgather)
    assert (dense.compression, dense.shared_reference, dense.error_feedback) == (1, False, False)
    for a2a in codecs("baseline", R.dispatch_a2a):
        assert (a2a.dtype, a2a.compression) == ("fp32", 1)
    assert not hasattr(_moecomm.build_schedule(MODEL, TWO_NODES, "ep=4", "baseline"),
                       "compression")  # the strategy's copy is gone: executors read the op
