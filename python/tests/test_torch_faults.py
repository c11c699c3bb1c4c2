"""moecomm.torch's timeout reaches every process group it creates; GradSync refuses a second
step() without a backward and skips frozen parameters; on every rank."""
from __future__ import annotations

import pytest

from conftest import require

require("torch")

import torch_faults  # noqa: E402

EP2_GROUPS = [[0, 1], [0, 1, 2, 3], [0, 2], [1, 3], [2, 3]]


def groups_of(rank):
    """The groups of ep=2 over 4 ranks that hold ``rank``: its EP pair, the experts'
    data-parallel pair, the world."""
    return [g for g in EP2_GROUPS if rank in g]

BAD = {
    "zero": "MoELayer: timeout must be positive and finite, got 0",
    "negative": "MoELayer: timeout must be positive and finite, got -1.5",
    "nan": "MoELayer: timeout must be positive and finite, got nan",
    "inf": "MoELayer: timeout must be positive and finite, got inf",
    "zero-timedelta": "MoELayer: timeout must be positive and finite, got "
                      "datetime.timedelta(0)",
    "str": "MoELayer: timeout must be a datetime.timedelta or a number of seconds, got a str",
    "bool": "MoELayer: timeout must be a datetime.timedelta or a number of seconds, got a bool",
    "netmoe": "SampleMovingMoE: timeout must be positive and finite, got -1",
}

DOUBLE_STEP = ("GradSync.step(): no backward since the last step() (nor a gradient when "
               "GradSync was built); call step() once after each loss.backward(): a second "
               "step() would synchronize the synchronized gradients again")


@pytest.fixture(scope="module")
def ranks(tmp_path_factory):
    return torch_faults.run_all(str(tmp_path_factory.mktemp("torch_faults")))


def test_default_group_timeout_is_read(ranks):
    for got in ranks:
        assert got["default"] == torch_faults.INIT_TIMEOUT_S


@pytest.mark.parametrize("case, seconds", [("seconds", 5.0), ("timedelta", 7.5)])
def test_timeout_reaches_every_group(ranks, case, seconds):
    # Given a timeout, the whole world gets a group of its own too (not the default group).
    for rank, got in enumerate(ranks):
        assert got[case] == [[g, seconds] for g in groups_of(rank)]


def test_no_timeout_takes_the_default_groups(ranks):
    for rank, got in enumerate(ranks):
        assert got["unset"] == [[g, None if len(g) == 4 else torch_faults.INIT_TIMEOUT_S]
                                for g in groups_of(rank)]


def test_sample_moving_groups_take_the_timeout(ranks):
    for rank, got in enumerate(ranks):
        assert [g for g, _ in got["netmoe"]] == groups_of(rank)
        assert all(seconds == 3.0 for _, seconds in got["netmoe"]), got["netmoe"]


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_timeout(ranks, case):
    for got in ranks:
        assert got[f"bad-{case}"] == BAD[case]


@pytest.mark.parametrize("overlap", [True, False])
def test_second_step_without_backward(ranks, overlap):
    for got in ranks:
        assert got[f"fresh-step-{overlap}"] == DOUBLE_STEP
        assert got[f"double-step-{overlap}"] == DOUBLE_STEP
        assert got[f"unchanged-{overlap}"] is True
        assert got[f"next-step-{overlap}"] is None


def test_built_after_backward(ranks):
    for got in ranks:
        assert got["late-first"] is None
        assert got["late-second"] == DOUBLE_STEP


def test_frozen_parameter_is_skipped(ranks):
    for got in ranks:
        assert got["frozen-gate-grad"] is None
        assert got["live-gate-grad"] == "set"
        assert got["frozen-expert-diff"] == 0.0


def test_everything_frozen_syncs_nothing(ranks):
    for got in ranks:
        assert got["all-frozen"] is None
        assert all(got["all-frozen-grads"])


def test_stalled_peer_fails_within_the_timeout(tmp_path):
    # The bound is generous (2 s timeout, 8 s stall) yet well below the default group's 60 s,
    # which the layer's collectives would wait without their own group.
    got = torch_faults.run_stalled(str(tmp_path))
    for rank in range(3):
        assert got[rank]["error"] is not None, f"rank {rank}: the forward did not fail"
        assert got[rank]["seconds"] < 30, f"rank {rank}: failed after {got[rank]['seconds']} s"
    assert got[3]["error"] is not None, "rank 3: the forward did not fail"
