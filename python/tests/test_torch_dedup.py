"""a2a=dedup in moecomm.torch on 4 gloo processes over two nodes (python/tests/torch_dedup.py):
a rank's dispatch sends each on-node member one row per distinct token with a slot there and
each other node one row per distinct token with a slot on it (exact, from the routing), in
the forward and the backward alike; the combine's crossing returns as many rows as the
dispatch's brought; and the dedup wire gives what the plain A2A-v gives (outputs and
gradients of whole layers: test_torch_layer.py's dedup cases)."""
from __future__ import annotations

import pytest

from conftest import require

torch = require("torch")

import torch_dedup  # noqa: E402

DISPATCHES = ("forward.moe.dispatch.a2a", "backward.moe.dispatch.a2a")
COMBINES = ("forward.moe.combine.a2a", "backward.moe.combine.a2a")


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    return torch_dedup.run_all(str(tmp_path_factory.mktemp("torch_dedup")))


def ok(got, rank):
    assert "error" not in got, f"rank {rank}: {got.get('error')}"
    return got


@pytest.mark.parametrize("case", [c[0] for c in torch_dedup.COUNT_CASES])
def test_dispatch_sends_each_token_once_per_member_and_node(results, case):
    saved = 0
    for rank, res in enumerate(results):
        got = ok(res[case], rank)
        assert sorted(got["sent"]) == sorted(DISPATCHES + COMBINES)
        for name in DISPATCHES:  # the first step: this rank's own tokens
            assert got["sent"][name][0] == got["want"], (rank, name)
        saved += sum(got["plain"].values()) - sum(got["want"].values())
    assert saved > 0  # the routing has tokens with several slots on one member or node


@pytest.mark.parametrize("case", [c[0] for c in torch_dedup.COUNT_CASES])
def test_combine_returns_what_the_dispatch_brought(results, case):
    sent = [ok(res[case], rank)["sent"] for rank, res in enumerate(results)]
    member = {res[case]["member"]: rank for rank, res in enumerate(results)}
    for rank, res in enumerate(results):
        me = str(res[case]["member"])
        for dispatch, combine in zip(DISPATCHES, COMBINES):
            for peer, rows in sent[rank][combine][-1].items():
                assert rows == sent[member[int(peer)]][dispatch][0][me], (rank, peer, combine)


def test_wire_equals_the_plain_a2a(results):
    for rank, res in enumerate(results):
        got = ok(res["wire"], rank)
        assert got["rows"] > 0
        assert got["rows_equal"] and got["scalars_equal"] and got["combine_scalars_equal"]
        assert got["combine_diff"] <= 1e-6
