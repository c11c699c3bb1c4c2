#!/usr/bin/env python3
"""NetMoE's two-stage placement as a training loop sees it, called from Python.

For I samples on N nodes of 8 devices (E = 2 experts per device, NetMoE Table 3's E = 2J),
each sample routing 2048 tokens with locality (30-70% to one preferred device, the rest
uniform, as bench_place.cpp draws them), every solver is timed:

  e2e_us     Python wall time of SamplePlacer.place(num): array checks, both stages, the
             result array (median over the repetitions)
  async_us   Python wall time of AsyncSamplePlacer submit(num) + collect()
  solve_us   the C++ wall time of both stages that Placement reports
  stage1_us  stage 1's solver alone on the same instance (bench_place.cpp's figure)
  build1/build2/solve2_us  the other pieces of SamplePlacer::place: building the stage-1
             and stage-2 cost matrices (NetMoE Eq. 8) and the N stage-2 solves

Run: PYTHONPATH=build/python python3 bench/bench_place.py [--quick]
Kuhn-Munkres and CBC stop at I = 1024 (O(I^3); seconds at 4096).
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

import numpy as np

import moecomm
from moecomm import place

DEVICES_PER_NODE = 8
TOKENS_PER_SAMPLE = 2048


def instance(samples: int, nodes: int, seed: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """Counts with locality: each sample sends 30-70% of its tokens to the experts of one
    device and scatters the rest uniformly; experts in equal contiguous blocks."""
    devices = nodes * DEVICES_PER_NODE
    experts = 2 * devices
    rng = np.random.default_rng(seed * 1000003 + samples * 31 + nodes)
    expert_device = np.repeat(np.arange(devices), 2).astype(np.int64)
    home = rng.integers(0, devices, samples)
    local = (rng.uniform(0.3, 0.7, samples) * TOKENS_PER_SAMPLE).astype(np.int64)
    num = np.zeros((samples, experts), dtype=np.int64)
    for i in range(samples):
        num[i] = np.bincount(rng.integers(0, experts, TOKENS_PER_SAMPLE - local[i]),
                             minlength=experts)
        num[i, 2 * home[i]] += local[i] // 2
        num[i, 2 * home[i] + 1] += local[i] - local[i] // 2
    return num, expert_device


def median_us(fn, reps: int) -> float:
    times = []
    for _ in range(reps):
        t = time.perf_counter_ns()
        fn()
        times.append((time.perf_counter_ns() - t) / 1e3)
    return statistics.median(times)


def reps_for(solver: str, samples: int) -> int:
    if solver in ("km", "ilp"):
        return 3 if samples > 384 else 10
    return 50 if samples > 384 else 300


def bench(samples: int, nodes: int, solvers: list[str]) -> dict[str, dict[str, float]]:
    num, expert_device = instance(samples, nodes)
    cost, capacity = place.node_stage_problem(num, expert_device, DEVICES_PER_NODE)
    rows = {}
    for solver in solvers:
        if solver in ("km", "ilp") and samples > 1024:
            continue
        reps = reps_for(solver, samples)
        sync = place.SamplePlacer(expert_device, DEVICES_PER_NODE, solver=solver)
        asyn = place.AsyncSamplePlacer(expert_device, DEVICES_PER_NODE, solver=solver)
        sync.place(num)  # warm: the first call pays page faults and lazy symbol binding
        solve = []

        def one_sync() -> None:
            solve.append(sync.place(num).solve_us)

        def one_async() -> None:
            asyn.submit(num)
            asyn.collect()

        e2e = median_us(one_sync, reps)
        one_async()
        async_us = median_us(one_async, reps)
        stage1 = statistics.median(place.assign(cost, capacity, solver)[2]
                                   for _ in range(reps))
        parts = moecomm._moecomm._stage_times(num, expert_device, DEVICES_PER_NODE, None, solver,
                                              reps)
        rows[solver] = dict(e2e_us=e2e, async_us=async_us, solve_us=statistics.median(solve),
                            stage1_us=stage1, build1_us=parts["stage1_build_us"],
                            build2_us=parts["stage2_build_us"],
                            solve2_us=parts["stage2_solve_us"])
    return rows


COLD = """
import time, numpy as np, sys
sys.path.insert(0, {here!r})
from bench_place import instance, DEVICES_PER_NODE
from moecomm import place
num, ed = instance({samples}, {nodes})
t = time.perf_counter_ns()
p = place.solve(num, ed, DEVICES_PER_NODE, solver={solver!r})
e2e = (time.perf_counter_ns() - t) / 1e3
print(p.solve_us, e2e)
"""


def cold(samples: int, nodes: int, solver: str) -> tuple[float, float]:
    """One solve in a fresh process, as `moecomm place --counts` runs it: (solve_us, e2e_us)."""
    import os
    code = COLD.format(here=os.path.dirname(os.path.abspath(__file__)), samples=samples,
                       nodes=nodes, solver=solver)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.split()
    return float(out[0]), float(out[1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="I = 384, N = 4 only")
    args = ap.parse_args()
    sizes = [(384, 4)] if args.quick else [(384, 4), (384, 16), (4096, 4), (4096, 16)]
    solvers = ["flow", "lemon-ns", "lemon-cs", "lemon-cap", "km"]
    print(f"{'I':>5} {'N':>3} {'solver':>9} {'e2e_us':>10} {'async_us':>10} {'solve_us':>10} "
          f"{'stage1_us':>10} {'build1_us':>10} {'build2_us':>10} {'solve2_us':>10} "
          f"{'km/e2e':>8}")
    for samples, nodes in sizes:
        rows = bench(samples, nodes, solvers)
        km = rows.get("km", {}).get("e2e_us")
        for solver, r in rows.items():
            ratio = f"{km / r['e2e_us']:.0f}x" if km else "-"
            print(f"{samples:>5} {nodes:>3} {solver:>9} {r['e2e_us']:>10.1f} "
                  f"{r['async_us']:>10.1f} {r['solve_us']:>10.1f} {r['stage1_us']:>10.1f} "
                  f"{r['build1_us']:>10.1f} {r['build2_us']:>10.1f} {r['solve2_us']:>10.1f} "
                  f"{ratio:>8}")
        flow = rows["flow"]["e2e_us"]
        lemon = min(rows[s]["e2e_us"] for s in rows if s.startswith("lemon"))
        verdict = f"flow {flow:.1f} us vs LEMON's best {lemon:.1f} us"
        if km:
            verdict += f", Kuhn-Munkres {km:.1f} us ({km / flow:.0f}x)"
        print(f"# I={samples} N={nodes}: {verdict}")
    solve_us, e2e = cold(384, 4, "flow")
    print(f"# one cold solve in a fresh process (as `moecomm place --counts`), I=384 N=4 flow: "
          f"solve_us {solve_us:.1f}, Python e2e {e2e:.1f} us")


if __name__ == "__main__":
    main()
