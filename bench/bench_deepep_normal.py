#!/usr/bin/env python3
"""moecomm's simulated MoE dispatch + combine against DeepEP's published normal-kernel figures.

DeepEP (github.com/deepseek-ai/DeepEP, README "Normal kernels with NVLink and RDMA forwarding")
measures on H800 (~160 GB/s NVLink per GPU, one CX7 400 Gb/s NIC per GPU, ~50 GB/s) with 4096
tokens per rank, hidden 7168, 256 experts top-8 within the best min(nodes, 4) nodes (its test
scores each node's experts as a group), FP8 dispatch (7168 bytes + one fp32 scale per 128
values per token) and BF16 combine. It reports a bottleneck RDMA bandwidth, the bytes of one
copy per (token, destination node), own node included, over the kernel's time:

    EP 16: dispatch 43 GB/s, combine 43 GB/s
    EP 32: dispatch 58 GB/s, combine 57 GB/s
    EP 64: dispatch 51 GB/s, combine 50 GB/s

so its time is t = 4096 x D x bytes_per_token / bandwidth, with D the expected number of nodes a
token reaches (computed here exactly, as sched/dedup_traffic.h does: a token picks its nodes,
then 8 experts uniformly among theirs). moecomm's time is `moecomm sim` of one MoE layer on the
same cluster shape with compute made free (its forward = dispatch + combine), with:
  flat      one row per (token, expert), bf16 both ways, any 8 of 256 experts
  dedup     a2a=dedup with node-limited routing (router_groups = nodes, router_group_top_k =
            min(nodes, 4)), a2a_dtype=fp8 dispatch / bf16 combine, as DeepEP runs.
It prints both times, their ratio, and the inter-node bytes per rank.

Run: PYTHONPATH=build/python MOECOMM_BINARY=build/moecomm python3 bench/bench_deepep_normal.py
"""
from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile

DEEPEP = {16: (43.0, 43.0), 32: (58.0, 57.0), 64: (51.0, 50.0)}  # GB/s, dispatch and combine
TOKENS, HIDDEN, EXPERTS, TOP_K, GPUS = 4096, 7168, 256, 8, 8


def fp8_row() -> int:
    return HIDDEN + 4 * math.ceil(HIDDEN / 128)


def nodes_reached(nodes: int) -> float:
    """Expected nodes a token reaches (own included): it picks min(nodes, 4) of the nodes,
    then TOP_K distinct experts among theirs."""
    picked = min(nodes, 4)
    allowed = picked * EXPERTS // nodes
    held = EXPERTS // nodes
    miss = math.comb(allowed - held, TOP_K) / math.comb(allowed, TOP_K)
    return nodes * (picked / nodes) * (1.0 - miss)


def cluster(nodes: int) -> dict:
    return {
        "name": f"h800-{nodes}x8",
        "description": "DeepEP's test machine shape: H800, ~160 GB/s NVLink per GPU, one 400 "
                       "Gb/s NIC per GPU (~50 GB/s, so 400 GB/s per node); compute made free",
        "levels": [{"name": "node", "count": nodes, "bandwidth_GBps": 400, "latency_us": 5},
                   {"name": "gpu", "count": GPUS, "bandwidth_GBps": 160, "latency_us": 2}],
        "device": {"tflops": 1e6, "memory_GB": 80, "memory_bandwidth_GBps": 1e6},
    }


def model(nodes: int, limited: bool) -> dict:
    m = {"name": "deepep-normal", "hidden": HIDDEN, "ffn_hidden": 2048, "experts": EXPERTS,
         "top_k": TOP_K, "layers": 1, "heads": 128, "seq_len": TOKENS, "micro_batch": 1,
         "capacity_factor": None, "dtype_bytes": 2, "ffn_type": "swiglu"}
    if limited:
        m["router_groups"] = nodes
        m["router_group_top_k"] = min(nodes, 4)
    return m


def simulate(binary: str, tmp: str, nodes: int, strategy: str, limited: bool) -> dict:
    cpath = os.path.join(tmp, f"c{nodes}.json")
    mpath = os.path.join(tmp, f"m{nodes}{int(limited)}.json")
    with open(cpath, "w") as f:
        json.dump(cluster(nodes), f)
    with open(mpath, "w") as f:
        json.dump(model(nodes, limited), f)
    out = subprocess.run([binary, "sim", "--model", mpath, "--cluster", cpath, "--parallel",
                          f"ep={nodes * GPUS}", "--strategy", strategy, "--json"],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--binary", default=os.environ.get("MOECOMM_BINARY", "build/moecomm"))
    ap.add_argument("--json", action="store_true", help="one JSON object per EP size")
    ap.add_argument("--check", action="store_true",
                    help="exit 1 unless dedup beats flat at every EP size (the CI smoke test)")
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for ep, (bw_d, bw_c) in DEEPEP.items():
            nodes = ep // GPUS
            d = nodes_reached(nodes)
            deepep_ms = 1e3 * TOKENS * d * (fp8_row() / (bw_d * 1e9) + 2 * HIDDEN / (bw_c * 1e9))
            row = {"ep": ep, "nodes_per_token": d, "deepep_ms": deepep_ms}
            for name, strategy, limited in (
                    ("flat", "baseline", False),
                    ("dedup", "a2a=dedup,a2a_dtype=fp8/bf16", True)):
                r = simulate(args.binary, tmp, nodes, strategy, limited)
                row[f"{name}_ms"] = r["forward_ms"]
                # The whole simulated step's (forward and backward A2As, gradient sync).
                row[f"{name}_step_inter_node_bytes_per_rank"] = r["bytes_by_level"][0] / ep
                row[f"{name}_ratio"] = r["forward_ms"] / deepep_ms
            rows.append(row)
    if args.check and not all(r["dedup_ms"] < r["flat_ms"] for r in rows):
        print("dedup is not faster than flat:", rows, file=sys.stderr)
        return 1
    if args.json:
        for row in rows:
            print(json.dumps(row))
        return 0
    print(f"{'EP':>3} {'nodes/token':>11} {'DeepEP ms':>10} {'flat ms':>8} {'x':>5} "
          f"{'dedup ms':>9} {'x':>5}")
    for r in rows:
        print(f"{r['ep']:>3} {r['nodes_per_token']:>11.3f} {r['deepep_ms']:>10.3f} "
              f"{r['flat_ms']:>8.3f} {r['flat_ratio']:>5.2f} {r['dedup_ms']:>9.3f} "
              f"{r['dedup_ratio']:>5.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
