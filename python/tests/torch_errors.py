"""Bad input to moecomm.torch on 4 gloo processes: each case's error message, per rank (and
a PlanRow-like strategy object, which is not an error)."""
from __future__ import annotations

import types

import torch

from torch_spawn import run_on_ranks

EIGHT = {"name": "2x4", "levels": [
    {"name": "node", "count": 2, "bandwidth_GBps": 1, "latency_us": 20},
    {"name": "gpu", "count": 4, "bandwidth_GBps": 10, "latency_us": 5}],
    "device": {"tflops": 1, "memory_GB": 16, "memory_bandwidth_GBps": 50}}

CASES = {
    "hybrid-esp": lambda mt: mt.MoELayer(16, 32, 8, strategy="base=hybridep,hybrid_domain=2",
                                         parallel="tp=2,ep=2,esp=2"),
    "netmoe": lambda mt: mt.MoELayer(16, 32, 8, strategy="netmoe", parallel="ep=4"),
    "unknown-gate": lambda mt: mt.MoELayer(16, 32, 8, gate="topk", parallel="ep=4"),
    "gate-spelling": lambda mt: mt.MoELayer(16, 32, 8, gate="expert_choice", parallel="ep=4"),
    "ffn-type": lambda mt: mt.MoELayer(16, 32, 8, ffn_type="relu", parallel="ep=4"),
    "experts-split": lambda mt: mt.MoELayer(16, 32, 6, parallel="ep=4"),
    "world": lambda mt: mt.MoELayer(16, 32, 8, parallel="ep=8", cluster=EIGHT),
    "strategy": lambda mt: mt.MoELayer(16, 32, 8, strategy="base=fsmoe,chunkz=2", parallel="ep=4"),
    "strategy-type": lambda mt: mt.MoELayer(16, 32, 8, strategy=3, parallel="ep=4"),
    "hidden": lambda mt: mt.MoELayer(16, 32, 8, parallel="ep=4")(torch.zeros(4, 15)),
    "grad-sync": lambda mt: mt.GradSync([]),
    "temperature-zero": lambda mt: mt.MoELayer(16, 32, 8, gate="xmoe", temperature=0,
                                               parallel="ep=4"),
    "temperature-negative": lambda mt: mt.MoELayer(16, 32, 8, gate="xmoe", temperature=-0.5,
                                                   parallel="ep=4"),
    "temperature-nan": lambda mt: mt.MoELayer(16, 32, 8, gate="xmoe",
                                              temperature=float("nan"), parallel="ep=4"),
    "temperature-netmoe": lambda mt: mt.SampleMovingMoE(16, 32, 8, gate="xmoe", temperature=0.0,
                                                        parallel="ep=4"),
    "type-hidden": lambda mt: mt.MoELayer("16", 32, 8, parallel="ep=4"),
    "type-seed": lambda mt: mt.MoELayer(16, 32, 8, seed=1.5, parallel="ep=4"),
    "type-capacity": lambda mt: mt.MoELayer(16, 32, 8, capacity_factor="1", parallel="ep=4"),
    "type-netmoe-eps": lambda mt: mt.SampleMovingMoE(16, 32, 8, eps="small", parallel="ep=4"),
    "netmoe-xmoe-dim": lambda mt: mt.SampleMovingMoE(16, 32, 8, xmoe_dim=0, parallel="ep=4"),
    "a2a-dtype-fp8": lambda mt: mt.MoELayer(16, 32, 8, strategy="a2a_dtype=fp8", parallel="ep=4"),
    "a2a-dtype-bf16": lambda mt: mt.MoELayer(16, 32, 8, strategy="base=lina,a2a_dtype=bf16",
                                             parallel="ep=4"),
    "a2a-dtype-netmoe": lambda mt: mt.SampleMovingMoE(16, 32, 8,
                                                      strategy="base=netmoe,a2a_dtype=fp8/bf16",
                                                      parallel="ep=4"),
}


def run_rank(rank):
    import moecomm
    import moecomm.torch as mt
    out = {}
    # Not an error: a PlanRow (anything with a .strategy string) is taken as its strategy.
    row = types.SimpleNamespace(strategy="base=fsmoe,chunks=2")
    out["plan-row-strategy"] = mt.MoELayer(16, 32, 8, strategy=row, parallel="ep=4").strategy
    for name, make in CASES.items():
        try:
            make(mt)
            out[name] = None
        except moecomm.Error as e:
            out[name] = str(e)
    return out


def run_all(outdir: str):
    return run_on_ranks(run_rank, outdir)
