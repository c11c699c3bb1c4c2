"""moecomm.torch's timeout reaches every process group it creates; GradSync refuses a second
step() without a backward and skips frozen parameters; a stalled or dead rank's peers raise
moecomm.Error naming the op within the timeout; on every rank."""
from __future__ import annotations

import json
import re
import time

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


FAILURE = re.compile(r"(?P<op>.+ \[layer 0, (forward|backward|none)\]): collective failed on "
                     r"rank (?P<rank>\d) with world ranks (?P<ranks>\[[\d, ]+\]) \(timeout "
                     r"(?P<timeout>[\d.]+) s\): a peer stalled past the timeout or died\. "
                     r"gloo: (?P<cause>.*)", re.S)


def check_failure(got, rank, case):
    """A rank's moecomm.Error in ``case``: names one of its collective ops, itself, that
    op's group, the layer's timeout, and carries gloo's message (the exception it chains).
    Returns the op and the seconds until it failed."""
    assert not got["overran"], f"rank {rank}: still running at the deadline"
    result = got["result"]
    assert result is not None, f"rank {rank}: exited with {got['exitcode']}, no result"
    assert case in result, f"rank {rank}: {result}"  # else a traceback: another error
    error = result[case]["error"]
    assert error is not None, f"rank {rank}: {case} raised no moecomm.Error"
    m = FAILURE.fullmatch(error["message"])
    assert m, f"rank {rank}: {error['message']}"
    assert m["op"] in result["ops"], f"rank {rank}: {m['op']} is none of {result['ops']}"
    assert int(m["rank"]) == rank
    assert json.loads(m["ranks"]) == result["ops"][m["op"]]
    assert rank in result["ops"][m["op"]]
    assert float(m["timeout"]) == torch_faults.TIMEOUT_S
    assert error["cause_type"] == "RuntimeError"
    assert m["cause"] == error["cause"] and error["cause"]
    return m["op"], result[case]["seconds"]


def run_fault(case, tmp_path):
    start = time.monotonic()
    got = torch_faults.run_fault(case, str(tmp_path))
    # No rank waits for the default group's timeout (60 s) or for the deadline.
    assert time.monotonic() - start < torch_faults.DEADLINE_S
    return got


def test_stalled_rank_fails_its_peers_by_the_timeout(tmp_path):
    got = run_fault("stall", tmp_path)
    bounds = (0.8 * torch_faults.TIMEOUT_S, torch_faults.TIMEOUT_S + torch_faults.MARGIN_S)
    for rank in range(3):
        # The forward's first collective, the layout AllGather of the gate op, waits for
        # the stalled rank; so does the backward's first A2A, in the runner: each fails by
        # the timeout, not by a closed connection.
        op, s = check_failure(got[rank], rank, "forward")
        assert op == "gate [layer 0, forward]"
        assert bounds[0] <= s < bounds[1], f"rank {rank}: forward failed after {s:.2f} s"
        op, s = check_failure(got[rank], rank, "backward")
        assert op.startswith("moe.") and op.endswith(" [layer 0, backward]"), op
        assert bounds[0] <= s < bounds[1], f"rank {rank}: backward failed after {s:.2f} s"
    # The stalled rank, back, finds its peers gone.
    for case in ("forward", "backward"):
        check_failure(got[torch_faults.FAULTY], torch_faults.FAULTY, case)


def check_dead_rank(fault: str, case: str, ops, tmp_path) -> None:
    """The faulty rank exited; each other rank failed in ``case`` at one of ``ops`` within
    the timeout and its margin."""
    got = run_fault(fault, tmp_path)
    assert got[torch_faults.FAULTY]["exitcode"] == 1
    assert got[torch_faults.FAULTY]["result"] is None
    for rank in range(3):
        op, s = check_failure(got[rank], rank, case)
        assert op in ops, op
        assert s < torch_faults.TIMEOUT_S + torch_faults.MARGIN_S, \
            f"rank {rank}: failed after {s:.2f} s"


def test_dead_rank_fails_its_peers_within_the_timeout(tmp_path):
    check_dead_rank("kill", "forward", ("gate [layer 0, forward]",), tmp_path)


def test_rank_dead_in_grad_sync_step_fails_its_peers(tmp_path):
    check_dead_rank("kill-in-step", "step", ("grad.dense.allreduce [layer 0, backward]",
                                             "grad.expert.allreduce [layer 0, backward]"),
                    tmp_path)
