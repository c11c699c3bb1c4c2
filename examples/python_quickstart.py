#!/usr/bin/env python3
"""moecomm from a Python training script: plan a strategy, simulate it, place samples with
NetMoE's asynchronous solver around a (pretend) MoE layer, and estimate the next layer's
expert popularity with Lina's estimator.

Run it from the repository root after `make build` with PYTHONPATH=build/python, or after
`pip install --no-build-isolation .`.
"""
from __future__ import annotations

import numpy as np

import moecomm
from moecomm import infer, place

MODEL, CLUSTER = "netmoe-moe-gpt-s", "netmoe-a800-4x8"  # 4 nodes x 8 GPUs, 64 experts


def plan_and_simulate() -> None:
    # budget_s=0: the papers' methods only, no knob search (a fraction of a second).
    p = moecomm.plan(MODEL, CLUSTER, budget_s=0)
    print(f"plan: {len(p.rows)} rows, recommended {p.recommended} "
          f"({p.best.total_ms:.3f} ms per step vs baseline {p.row('baseline').total_ms:.3f} ms)")
    r = moecomm.simulate(MODEL, CLUSTER, p.best.parallel, p.best.strategy)
    gb = ", ".join(f"{n} {b / 1e9:.2f} GB" for n, b in zip(r.level_names, r.bytes_by_level))
    print(f"simulate {p.recommended}: {r.iteration_ms:.3f} ms per step; bytes by level: {gb}")


def place_samples(rng: np.random.Generator) -> None:
    devices, per_node, experts, samples = 32, 8, 64, 128
    expert_device = np.repeat(np.arange(devices), experts // devices)
    placer = place.AsyncSamplePlacer(expert_device, per_node)
    for layer in range(3):
        # After layer l's gate: tokens per sample and expert (gather(l) + scatter(l+1)).
        home = rng.integers(0, devices, samples)
        num = rng.poisson(4, (samples, experts))
        for i, d in enumerate(home):
            num[i, 2 * d:2 * d + 2] += 800  # data locality: most tokens stay with one device
        placer.submit(num)
        # ... the scatter all-to-all and the experts run here, while C++ solves ...
        p = placer.collect()  # before the gather
        print(f"placement layer {layer}: inter-node tokens {p.inter_node_tokens}, "
              f"solve {p.solve_us:.0f} us, waited {p.wait_us:.0f} us")


def estimate_popularity(rng: np.random.Generator) -> None:
    experts, layers, samples, tokens = 8, 3, 4, 16
    history = rng.integers(0, experts, (8, layers, samples, tokens, 1))
    history[:, 1] = (history[:, 0] + 1) % experts  # paths predict the next layer
    est = infer.PopularityEstimator(history, experts, path_length=1)
    batch = history[0]
    popularity, plan = est.plan(batch, layer=0, devices=4)
    print("estimated popularity of layer 1:", np.round(popularity, 3).tolist())
    print("replicas per expert:", [len(d) for d in plan.devices_of_expert])


if __name__ == "__main__":
    generator = np.random.default_rng(0)
    plan_and_simulate()
    place_samples(generator)
    estimate_popularity(generator)
