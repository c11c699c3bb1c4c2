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
