"""moecomm.torch.GradSync(micro_batches=M) on 4 gloo processes (python/tests/
torch_accumulation.py): M = 4 micro-batches of b tokens accumulated, then synchronized once,
equal one batch of 4 b within 1e-5 (fp32, relative to the batch's magnitude) for every
strategy the layers run: outputs, input gradients, and the synchronized gradients of a dense
layer, the gate and the experts. A step issues the gradient collectives of one backward
whatever M is, all in the last backward and step(); the accumulating backwards cost no op
beyond autograd's own and no host sync."""
from __future__ import annotations

import pytest

from conftest import require

torch = require("torch")

import torch_accumulation as ta  # noqa: E402
from torch_spawn import assert_matches_reference  # noqa: E402

M = ta.M


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    return ta.run_all(str(tmp_path_factory.mktemp("accumulation")))


@pytest.mark.parametrize("case", [c[0] for c in ta.CASES] + ["netmoe"])
def test_micro_batches_equal_one_batch(results, case):
    for rank, res in enumerate(results):
        assert_matches_reference(res[case], rank, case)
    # Synchronized: every data-parallel replica holds the same gate gradient (all ranks are
    # replicas of the gate).
    assert all(res[case]["gate_grad"] == results[0][case]["gate_grad"] for res in results)


def test_cases_cover_every_strategy():
    strategies = " ".join(c[1] for c in ta.CASES) + " " + ta.NETMOE[1]
    for name in ("baseline", "hier-a2a", "monta-o1", "monta-o2", "monta-o3", "fsmoe", "lina",
                 "hybridep", "netmoe"):
        assert name in strategies
    # Both modes: gradient ops during the last backward, and all in step().
    assert {c[5] for c in ta.CASES} == {True, False}


@pytest.mark.parametrize("name", [c[0] for c in ta.COUNTED])
def test_one_gradient_sync_per_step(results, name):
    for rank, res in enumerate(results):
        one, acc = res[f"count-{name}-1"], res[f"count-{name}-{M}"]
        for got in (one, acc):
            assert "error" not in got, f"rank {rank}: {got.get('error')}"
        ops = one["grad_ops"]
        assert ops > 0
        # Every gradient op of the schedule once per step, whatever M is ...
        assert sum(one["allreduce"].values()) == ops, (rank, one)
        assert sum(acc["allreduce"].values()) == ops, (rank, acc)
        # ... issued when M = 1 issues them: none in the accumulating backwards.
        last = {k.replace(f"backward {M}", "backward 1"): v for k, v in acc["allreduce"].items()}
        assert last == one["allreduce"], (rank, one, acc)
        # The accumulating backwards run the ops of a layer without GradSync, and no host
        # sync anywhere.
        for m in range(1, M):
            assert acc["ops"][str(m)] == acc["plain_ops"][str(m)], (rank, m, acc)
        for got in (one, acc):
            assert all(s == {} for s in got["syncs"].values()), (rank, got["syncs"])


def test_overlap_issues_gradient_ops_during_the_last_backward(results):
    """Bucketed: both buckets start in the last backward. (Lina's micro-ops wait for a gap
    between A2As, which one layer's backward has none of: step() issues them, for M = 1
    alike.)"""
    for rank, res in enumerate(results):
        acc = res[f"count-baseline-{M}"]["allreduce"]
        assert acc == {f"backward {M}": res["count-baseline-1"]["grad_ops"]}, (rank, acc)
        after = res[f"count-fsmoe-after-{M}"]["allreduce"]
        assert set(after) == {"step"}, (rank, after)


REFUSED_ZERO = ("MoELayer: strategy: zero: ZeRO stage {} shards optimizer state, gradients or "
                "parameters over the data-parallel group, which moecomm.torch does not run "
                "(GradSync AllReduces whole gradients); use zero=0")
REFUSED_OVERLAP = ("{}: strategy: overlap_microbatches: overlapping one micro-batch's forward "
                   "with another's backward needs a pipeline schedule, which moecomm.torch's "
                   "single layer does not run; use overlap_microbatches=false "
                   "(GradSync(micro_batches=M) accumulates micro-batches)")
EARLY = ("GradSync.step(): {} of the step's 3 backwards (micro_batches=3) ran since the last "
         "step(); run the other {} forward and backward first")
NO_BACKWARD = ("GradSync.step(): no backward since the last step() (nor a gradient when "
               "GradSync was built); call step() once after each loss.backward(): a second "
               "step() would synchronize the synchronized gradients again")


def test_step_knobs_refused_by_name_and_accumulation_errors(results):
    for rank, res in enumerate(results):
        got = res["refusals"]
        assert "error" not in got, f"rank {rank}: {got.get('error')}"
        assert got["zero"] == REFUSED_ZERO.format(1)
        assert got["zero-3"] == REFUSED_ZERO.format(3)
        assert got["netmoe-zero"] == REFUSED_ZERO.format(2).replace("MoELayer",
                                                                    "SampleMovingMoE")
        assert got["overlap-microbatches"] == REFUSED_OVERLAP.format("MoELayer")
        assert got["netmoe-overlap"] == REFUSED_OVERLAP.format("SampleMovingMoE")
        # A pipeline's order means nothing to one layer: accepted; V model chunks need V layers.
        for s in ("gpipe", "1f1b", "netmoe"):
            assert got[f"pp-{s}"] is None
        assert got["pp-interleaved:2"] == ("layers: 1 blocks cannot fill pp = 1 stages x 2 "
                                           "virtual stages: give at least 2")
        for bad in ("0", "-1"):
            assert got[f"micro-{bad}"] == (f"GradSync: micro_batches must be a positive "
                                           f"integer, got {bad}")
        assert got["micro-2.0"] == "GradSync: micro_batches: must be an integer, got a float"
        assert got["micro-'4'"] == "GradSync: micro_batches: must be an integer, got a str"
        assert got["micro-True"] == "GradSync: micro_batches: must be an integer, got a bool"
        for overlap in (True, False):
            assert got[f"none-{overlap}"] == NO_BACKWARD
            assert got[f"early-{overlap}"] == EARLY.format(2, "1 micro-batch's")
            assert got[f"extra-{overlap}"] == (
                "GradSync(micro_batches=3): backward 4 before step(); a step takes exactly 3 "
                "backwards: call step() after backward 3")
            assert got[f"step-{overlap}"] is None  # the refused backward counted nothing
            assert got[f"again-{overlap}"] == NO_BACKWARD
            assert got[f"one-of-three-{overlap}"] == EARLY.format(1, "2 micro-batches'")
        assert got["second-of-one"] == (
            "GradSync(micro_batches=1): backward 2 before step(); a step takes exactly 1 "
            "backward: call step() after backward 1")
