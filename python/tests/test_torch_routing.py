"""moecomm.torch's node-limited routing (routing.group_limited_topk, the rule of moecomm's nn
gates): the worked case of tests/nn/gate_test.cpp gives the same experts; no token reaches
more than router_group_top_k groups; without a limit the gates route as before; bad shapes
are errors naming the key. Outputs and gradients of MoELayer with the limit against the
reference: torch_cases.py's node-limited cases."""
from __future__ import annotations

import pytest

from conftest import require

torch = require("torch")

import moecomm  # noqa: E402
from moecomm.torch import routing as rt  # noqa: E402

TOKEN_CHOICE = ("gshard", "sigmoid", "xmoe")


def node_limited_logits():
    """tests/nn/gate_test.cpp's node_limited_logits: 8 experts in 4 groups of 2."""
    return torch.tensor([[3, -5, 1, 1, 2.5, -4, 0, 0],
                         [2, 1.9, 2.5, -5, 2.4, -5, 0, 0],
                         [0, 0.1, 0.2, 0.3, 3, 2, 1, 2.2]])


def test_worked_case_equals_the_nn_gate():
    x = node_limited_logits()
    _, expert, weight = rt.choose("gshard", x, torch.eye(8), 3, None, 8,
                                  router_groups=4, router_group_top_k=2)
    assert expert.tolist() == [0, 4, 5, 2, 0, 1, 4, 7, 5]
    p = torch.softmax(x, dim=-1)
    chosen = expert.reshape(3, 3)
    want = p.gather(1, chosen) / p.gather(1, chosen).sum(dim=-1, keepdim=True)
    assert torch.equal(weight, want.reshape(-1))
    # Without the limit the second token takes expert 4 (group 2) where the limit keeps group 1.
    _, plain, _ = rt.choose("gshard", x, torch.eye(8), 3, None, 8)
    assert plain.reshape(3, 3)[1].tolist() == [2, 4, 0]


def gate_args(gate, experts, seed):
    gen = torch.Generator().manual_seed(seed)
    width = 8 if gate == "xmoe" else experts
    weight = torch.randn(width, 12, generator=gen)
    embeddings = torch.randn(experts, 8, generator=gen) if gate == "xmoe" else None
    x = torch.randn(64, 12, generator=gen)
    return x, weight, embeddings


def most_groups(expert, top_k, per_group):
    groups = (expert.reshape(-1, top_k) // per_group).tolist()
    return max(len(set(row)) for row in groups)


@pytest.mark.parametrize("gate", TOKEN_CHOICE)
def test_no_token_reaches_more_than_group_top_k_groups(gate):
    """32 experts in 8 groups of 4, top-6: within 2 (then 3) groups; without the limit some
    token reaches more than 3."""
    x, weight, embeddings = gate_args(gate, 32, 3)
    _, plain, _ = rt.choose(gate, x, weight, 6, None, 32, embeddings)
    assert most_groups(plain, 6, 4) > 3
    for group_top_k in (2, 3):
        token, expert, w = rt.choose(gate, x, weight, 6, None, 32, embeddings,
                                     router_groups=8, router_group_top_k=group_top_k)
        assert token.tolist() == [t for t in range(64) for _ in range(6)]
        assert most_groups(expert, 6, 4) == group_top_k
        assert len(set(map(tuple, expert.reshape(-1, 6).tolist()))) > 1
        assert torch.isfinite(w).all()


@pytest.mark.parametrize("gate", TOKEN_CHOICE)
def test_without_a_limit_it_is_the_plain_gate(gate):
    x, weight, embeddings = gate_args(gate, 16, 4)
    plain = rt.choose(gate, x, weight, 4, None, 16, embeddings)
    for groups, group_top_k in ((1, 0), (1, 1), (4, 0), (4, 4), (16, 16)):
        got = rt.choose(gate, x, weight, 4, None, 16, embeddings,
                        router_groups=groups, router_group_top_k=group_top_k)
        for a, b in zip(got, plain):
            assert torch.equal(a, b), (gate, groups, group_top_k)


def test_weights_keep_their_gradient_through_the_chosen_experts():
    """The limit chooses which experts carry a weight; d weight / d logits is the plain
    top-k's on the same choice (renormalised softmax over the chosen)."""
    x = node_limited_logits().requires_grad_()
    _, expert, weight = rt.choose("gshard", x, torch.eye(8), 3, None, 8,
                                  router_groups=4, router_group_top_k=2)
    r = torch.arange(9, dtype=torch.float32)
    (weight * r).sum().backward()
    y = node_limited_logits().requires_grad_()
    p = torch.softmax(y, dim=-1).gather(1, expert.reshape(3, 3))
    ((p / p.sum(dim=-1, keepdim=True)).reshape(-1) * r).sum().backward()
    assert torch.equal(x.grad, y.grad)


def test_bad_groups_are_errors_naming_the_key():
    def error(gate="gshard", experts=8, top_k=2, groups=1, group_top_k=0):
        with pytest.raises(moecomm.Error) as e:
            rt.check_groups("MoELayer", experts, top_k, gate, groups, group_top_k)
        return str(e.value)

    assert error(groups=3) == ("MoELayer: router_groups: router_groups = 3 does not divide "
                               "experts = 8 (the groups are equal)")
    assert error(groups=0) == "MoELayer: router_groups: must be >= 1, got 0"
    assert error(groups=4, group_top_k=5).startswith(
        "MoELayer: router_group_top_k: must be in [0, router_groups = 4]")
    assert error(groups=8, group_top_k=1) == (
        "MoELayer: router_group_top_k: router_group_top_k x (experts / router_groups) = 1 x 1 "
        "= 1 is fewer than top_k = 2 (a token's groups must hold its experts)")
    assert "must be an integer" in error(groups=2.5)
    assert "expert-choice gate lets experts choose tokens" in error(
        gate="expert-choice", groups=4, group_top_k=2)
    rt.check_groups("MoELayer", 8, 2, "expert-choice", 4, 4)  # no limit: accepted
    rt.check_groups("MoELayer", 256, 8, "gshard", 8, 4)
