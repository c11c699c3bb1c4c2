"""How the runner reports a failing collective, in this process on a one-rank gloo world:
a backend's RuntimeError from a collective (issued, or waited for) becomes moecomm.Error
naming the op, chained to it; any other error of a kernel passes unchanged.
(test_torch_faults.py runs real stalls and deaths on 4 processes.)"""
from __future__ import annotations

import datetime
from types import SimpleNamespace

import pytest

from conftest import require

torch = require("torch")

import torch.distributed as dist  # noqa: E402

import moecomm  # noqa: E402
from moecomm.torch import collectives as col  # noqa: E402
from moecomm.torch.runner import OpTimes, Runner  # noqa: E402

ROLE = "collective"  # the kernels' key: any hashable stands for an OpRole


@pytest.fixture(scope="module", autouse=True)
def world(tmp_path_factory):
    store = tmp_path_factory.mktemp("collective_errors") / "store"
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=0, world_size=1,
                            timeout=datetime.timedelta(seconds=42))
    yield
    dist.destroy_process_group()


def op(op_id=4):
    return SimpleNamespace(id=op_id, rank=0, name="moe.combine.a2a", layer=1,
                           phase="backward", role=ROLE, prev=-1, deps=[],
                           waits_for_micro_ops=False)


class FailingWork:
    """A backend's work whose wait() fails, as gloo's does on a timeout."""

    def wait(self):
        raise RuntimeError("Timed out waiting 42000ms for recv operation to complete")


def run(kernel):
    Runner({ROLE: kernel}, OpTimes()).run([op()])


WANT = ("moe.combine.a2a [layer 1, backward]: collective failed on rank 0 with world ranks "
        "[0] (timeout 42 s): a peer stalled past the timeout or died. gloo: ")


def test_failure_while_waiting_names_the_op():
    with pytest.raises(moecomm.Error) as info:
        run(lambda o: col.Pending(FailingWork(), lambda: None, None))
    assert str(info.value) == WANT + "Timed out waiting 42000ms for recv operation to complete"
    assert isinstance(info.value.__cause__, RuntimeError)
    assert str(info.value.__cause__) == "Timed out waiting 42000ms for recv operation to " \
                                        "complete"


def test_failure_while_issuing_names_the_op():
    def issue(*args, group, async_op):
        raise RuntimeError("Connection closed by peer")

    with pytest.raises(moecomm.Error) as info:
        run(lambda o: col._issue(issue, group=None))
    assert str(info.value) == WANT + "Connection closed by peer"
    assert str(info.value.__cause__) == "Connection closed by peer"


def test_failure_inside_a_wrapping_pending_names_the_op():
    # A collective's Pending inside another (a routed A2A's step, a sum after an A2A): the
    # inner collective's failure is the one reported.
    inner = col.Pending(FailingWork(), lambda: None, None)
    with pytest.raises(moecomm.Error) as info:
        run(lambda o: col.Pending(inner, lambda: inner.wait()))
    assert str(info.value).startswith(WANT)


def test_other_errors_pass_unchanged():
    def bug(o):
        raise RuntimeError("mat1 and mat2 shapes cannot be multiplied")

    with pytest.raises(RuntimeError, match="^mat1 and mat2 shapes cannot be multiplied$"):
        run(bug)

    def unpack():  # a finish step's own error, after the collective completed
        raise RuntimeError("split_with_sizes expects split_sizes to sum exactly")

    inner = col.Pending(None, lambda: torch.zeros(1))
    with pytest.raises(RuntimeError) as info:
        run(lambda o: col.Pending(inner, unpack))
    assert not isinstance(info.value, moecomm.Error)
    assert not hasattr(info.value, col.FAILED_GROUP)


def test_a_group_given_reports_any_runtime_error():
    group = dist.new_group([0], timeout=datetime.timedelta(seconds=5))
    with pytest.raises(moecomm.Error) as info:
        with Runner.reporting(op(), group):
            raise RuntimeError("Connection reset by peer")
    assert str(info.value) == (
        "moe.combine.a2a [layer 1, backward]: collective failed on rank 0 with world ranks "
        "[0] (timeout 5 s): a peer stalled past the timeout or died. gloo: Connection reset "
        "by peer")
    with pytest.raises(ValueError, match="^not a collective's$"):  # not a RuntimeError
        with Runner.reporting(op(), group):
            raise ValueError("not a collective's")
