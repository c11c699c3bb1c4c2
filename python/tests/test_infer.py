import numpy as np
import pytest

import moecomm
from moecomm import infer

E, LAYERS, SAMPLES, TOKENS = 8, 4, 4, 32


def skewed_routing(iterations: int, seed: int = 0) -> np.ndarray:
    """Top-1 routing where a token's next expert follows its current one (e -> e + 1 mod E)
    three times in four, so paths predict the next layer."""
    rng = np.random.default_rng(seed)
    r = np.zeros((iterations, LAYERS, SAMPLES, TOKENS, 1), dtype=np.int64)
    popularity = [.4, .2, .1, .1, .1, .05, .03, .02]
    r[:, 0] = rng.choice(E, size=(iterations, SAMPLES, TOKENS, 1), p=popularity)
    for layer in range(1, LAYERS):
        follow = rng.random((iterations, SAMPLES, TOKENS, 1)) < 0.75
        r[:, layer] = np.where(follow, (r[:, layer - 1] + 1) % E,
                               rng.integers(0, E, size=(iterations, SAMPLES, TOKENS, 1)))
    return r


def test_estimate_tracks_the_actual_popularity():
    history = skewed_routing(16)
    est = infer.PopularityEstimator(history, experts=E, path_length=2)
    assert (est.experts, est.top_k, est.layers, est.path_length) == (E, 1, LAYERS, 2)
    batch = skewed_routing(1, seed=7)[0]
    pop = est.estimate(batch, layer=1)
    assert pop.shape == (E,) and pop.dtype == np.float64
    # Eq. 1 keeps the top-k of each path's distribution: the mass it cuts is "no estimate".
    assert 0.5 < pop.sum() <= 1.0 + 1e-9
    actual = infer.expert_counts(batch[2], E)
    assert actual.sum() == SAMPLES * TOKENS
    # The most popular expert is estimated right.
    assert np.argmax(pop) == np.argmax(actual)
    assert est.marginal(0).sum() == pytest.approx(1.0)


def test_two_phase_replication():
    history = skewed_routing(16)
    est = infer.PopularityEstimator(history, experts=E, path_length=1)
    batch = skewed_routing(1, seed=3)[0]
    pop, phase_one = est.plan(batch, layer=0, devices=4, max_experts_per_device=4)
    assert len(phase_one.devices_of_expert) == E
    assert all(phase_one.devices_of_expert[e] for e in range(E))
    hosted = phase_one.experts_of_device(4)
    # Every expert hosted, every one of the 4 x 4 slots used (popular experts replicated).
    assert sorted({e for d in hosted for e in d}) == list(range(E))
    assert [len(d) for d in hosted] == [4] * 4
    actual = infer.expert_counts(batch[1], E)
    replanned, plan = infer.fine_tune(phase_one, pop, actual, top_k=1, devices=4)
    assert isinstance(replanned, bool)
    loads = infer.device_loads(plan, actual, 4)
    assert loads.sum() == pytest.approx(actual.sum())
    # An estimate that names the wrong experts is re-planned.
    wrong = np.roll(pop, 3)
    replanned, _ = infer.fine_tune(phase_one, wrong, actual, top_k=1, devices=4)
    assert replanned


def expected_max_over_mean(devices_of_expert, load, devices):
    """Max/mean device load, each expert's load split evenly over its replicas."""
    per_device = np.zeros(devices)
    for e, on in enumerate(devices_of_expert):
        for d in on:
            per_device[d] += load[e] / len(on)
    return per_device.max() / per_device.mean()


def test_plan_replication_direct():
    # 4 devices x 2 slots: half the tokens get half the 8 slots, each replica carries 1/8.
    plan = infer.plan_replication(np.array([0.5, 0.25, 0.125, 0.125]), devices=4,
                                  max_experts_per_device=2)
    assert [len(on) for on in plan.devices_of_expert] == [4, 2, 1, 1]
    assert plan.max_over_mean == 1.0 and plan.ep_max_over_mean == 2.0
    assert "max_over_mean=1.000, ep_max_over_mean=2.000" in repr(plan)


def test_plan_replication_fills_every_slot():
    # Fewer experts than slots: every device hosts every expert, a quarter of each.
    plan = infer.plan_replication([0.5, 0.2, 0.2, 0.1], devices=4, max_experts_per_device=4)
    assert plan.devices_of_expert == [[0, 1, 2, 3]] * 4
    assert plan.max_over_mean == pytest.approx(1.0)
    assert plan.ep_max_over_mean == pytest.approx(2.0)
    # 3 devices x 2 slots: replicas (2, 3, 1) put .25 + .1 on two devices, .1 + .2 on one.
    plan = infer.plan_replication([0.5, 0.3, 0.2], devices=3, max_experts_per_device=2)
    assert plan.devices_of_expert == [[0, 1], [0, 1, 2], [2]]
    assert plan.max_over_mean == pytest.approx(1.05)
    assert plan.ep_max_over_mean == pytest.approx(1.5)


def test_plan_reports_balance_beside_plain_ep():
    history = skewed_routing(16)
    est = infer.PopularityEstimator(history, experts=E, path_length=1)
    batch = skewed_routing(1, seed=5)[0]
    pop, plan = est.plan(batch, layer=0, devices=4, max_experts_per_device=3)
    assert sum(len(on) for on in plan.devices_of_expert) == 4 * 3  # every slot used
    assert plan.max_over_mean == pytest.approx(expected_max_over_mean(plan.devices_of_expert,
                                                                      pop, 4))
    ep = [[e * 4 // E] for e in range(E)]
    assert plan.ep_max_over_mean == pytest.approx(expected_max_over_mean(ep, pop, 4))
    assert plan.max_over_mean < plan.ep_max_over_mean
    actual = infer.expert_counts(batch[1], E)
    for estimate in (pop, np.roll(pop, 3)):  # kept, then re-planned
        _, tuned = infer.fine_tune(plan, estimate, actual, top_k=1, devices=4,
                                   max_experts_per_device=3)
        loads = infer.device_loads(tuned, actual, 4)
        assert tuned.max_over_mean == pytest.approx(loads.max() / loads.mean())
        assert tuned.ep_max_over_mean == pytest.approx(expected_max_over_mean(ep, actual, 4))


def test_bad_routing():
    history = skewed_routing(2)
    bad = history.copy()
    bad[1, 2, 3, 4, 0] = E
    with pytest.raises(moecomm.Error,
                       match=r"routing\[1\]\[2\]\[3\]\[4\]\[0\]: expert id 8 is outside \[0, 8\)"):
        infer.PopularityEstimator(bad, experts=E)
    with pytest.raises(moecomm.Error, match="routing: must be a 5-D array, got shape"):
        infer.PopularityEstimator(history[0], experts=E)
    with pytest.raises(moecomm.Error, match="routing: must hold integers"):
        infer.PopularityEstimator(history.astype(np.float32), experts=E)
    with pytest.raises(moecomm.Error):
        infer.PopularityEstimator(history, experts=E, path_length=LAYERS)
    est = infer.PopularityEstimator(history, experts=E)
    with pytest.raises(moecomm.Error, match="layer"):
        est.estimate(history[0], layer=LAYERS)
    with pytest.raises(moecomm.Error, match=r"batch\[0\]\[0\]\[0\]\[0\]: expert id -1"):
        b = history[0].copy()
        b[0, 0, 0, 0] = -1
        est.estimate(b, layer=0)
    with pytest.raises(moecomm.Error, match="popularity"):
        infer.plan_replication(np.array([0.9, 0.9]), devices=2)
    with pytest.raises(moecomm.Error, match="devices"):
        infer.plan_replication(np.array([0.5, 0.5]), devices=0)
