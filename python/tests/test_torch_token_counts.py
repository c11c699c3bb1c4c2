"""moecomm.torch.MoELayer's token path costs what a plain expert-parallel layer costs on the
host: one host sync per layer in the forward (the counts' read), none in the backward, and
a number of torch ops outside the experts' GEMMs that does not grow with the experts (8 vs
256) or the EP members (2 vs 4) - exact counts, on 4 gloo processes
(python/tests/torch_token_counts.py)."""
from __future__ import annotations

import pytest

from conftest import require

torch = require("torch")

import torch_token_counts as tc  # noqa: E402


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    return tc.run_all(str(tmp_path_factory.mktemp("token_counts")))


def cells(results, case):
    experts = dict((c[0], c[3]) for c in tc.CASES + tc.DEDUP_CASES)[case]
    return [{e: r[f"{case}-{e}"] for e in experts} for r in results]


@pytest.mark.parametrize("case", [c[0] for c in tc.CASES])
def test_one_host_sync_forward_none_backward(results, case):
    for rank, by_experts in enumerate(cells(results, case)):
        for experts, got in by_experts.items():
            assert "error" not in got, f"rank {rank}: {got.get('error')}"
            assert got["forward"]["syncs"] == {"cpu": 1}, (rank, experts, got)
            assert got["backward"]["syncs"] == {}, (rank, experts, got)


@pytest.mark.parametrize("case", [c[0] for c in tc.CASES])
def test_ops_outside_the_experts_do_not_grow_with_experts(results, case):
    for rank, by_experts in enumerate(cells(results, case)):
        few, many = (by_experts[e] for e in sorted(by_experts))
        for phase in ("forward", "backward"):
            assert few[phase]["ops"] == many[phase]["ops"], (rank, phase, few, many)
            assert few[phase]["ops"] > 0


@pytest.mark.parametrize("case", ["baseline", "fsmoe-chunks4"])
def test_ops_outside_the_experts_do_not_grow_with_ep_members(results, case):
    for rank, (ep4, ep2) in enumerate(zip(cells(results, case), cells(results, case + "-ep2"))):
        for experts in ep4:
            for phase in ("forward", "backward"):
                assert ep4[experts][phase]["ops"] == ep2[experts][phase]["ops"], (
                    rank, experts, phase, ep4[experts][phase], ep2[experts][phase])


@pytest.mark.parametrize("case,chunks", [("dedup", 1), ("dedup-chunks2", 2)])
def test_dedup_reads_one_count_exchange_per_dispatch_step(results, case, chunks):
    """a2a=dedup's message sizes depend on the tokens: each of its two dispatch steps per
    chunk reads its count exchange once on the host; its combine reads nothing, and its ops
    outside the experts do not grow with the experts."""
    for rank, by_experts in enumerate(cells(results, case)):
        for experts, got in by_experts.items():
            assert "error" not in got, f"rank {rank}: {got.get('error')}"
            assert got["forward"]["syncs"] == {"cpu": 1, "tolist": 2 * chunks}, (rank, got)
            assert got["backward"]["syncs"] == {"tolist": 2 * chunks}, (rank, got)
        few, many = (by_experts[e] for e in sorted(by_experts))
        for phase in ("forward", "backward"):
            assert few[phase]["ops"] == many[phase]["ops"] > 0, (rank, phase, few, many)
