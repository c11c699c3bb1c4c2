"""Measured beside predicted: the torch world profiled into a cluster file, and a layer's
per-op wall times set beside the simulator's times for the same schedule on that cluster
(what ``moecomm sim`` predicts for the very ops that ran)."""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence

import numpy as np
import torch
import torch.distributed as dist

from .layer import MoELayer
from .runner import OpTimes


def _slowest(seconds: float, device: torch.device) -> float:
    t = torch.tensor([seconds], dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return float(t.item())


def _timed(fn, repeats: int, device: torch.device) -> float:
    """Seconds per call of ``fn``, slowest rank: on a GPU between two CUDA events on the
    current stream (its kernels run asynchronously: the host's clock would time their
    launch), on CPU by the host's clock."""
    fn()  # warm-up
    _sync(device)
    dist.barrier()
    times = OpTimes(device)
    start = times.now()
    for _ in range(repeats):
        fn()
    times.record(0, start, times.now())
    begin, end = times.spans[0]  # waits for the device's work
    return _slowest((end - begin) / repeats, device)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":  # GPU only: kernels run asynchronously
        torch.cuda.synchronize(device)


def profile_cluster(sizes: Sequence[int] = (1 << 12, 1 << 16, 1 << 20), repeats: int = 5,
                    gemm: int = 256) -> Dict[str, Any]:
    """Measures torch.distributed's world as a one-level cluster (collective: every rank
    calls it). The link is alpha-beta fitted (least squares) to ``all_to_all_single``
    times, slowest rank, over ``sizes`` bytes per rank: latency_us = alpha, bandwidth_GBps =
    the bytes a rank sends to the others over (time - alpha). The device's fp32 rate is a
    ``gemm`` x ``gemm`` matmul's. Returns a cluster dict (README "Files")."""
    world = dist.get_world_size()
    # NCCL moves device memory (this line and the next only run on GPUs).
    on_gpu = str(dist.get_backend()).lower() == "nccl"
    device = torch.device("cuda", torch.cuda.current_device()) if on_gpu else torch.device("cpu")
    points = []
    for size in sizes:
        floats = max(world, size // 4 // world * world)
        send, recv = torch.randn(floats, device=device), torch.empty(floats, device=device)
        t = _timed(lambda: dist.all_to_all_single(recv, send), repeats, device)
        points.append((floats * 4 * (world - 1) / world, t))
    sent, secs = np.array(points).T
    slope, alpha = np.polyfit(sent, secs, 1)
    a, b = torch.randn(gemm, gemm, device=device), torch.randn(gemm, gemm, device=device)
    flops = 2 * gemm ** 3 / _timed(lambda: a @ b, repeats, device)
    return {"name": f"torch-{dist.get_backend()}-{world}",
            "description": "measured by moecomm.torch.profile_cluster",
            "levels": [{"name": "proc", "count": world,
                        "bandwidth_GBps": 1 / max(slope, 1e-15) / 1e9,
                        "latency_us": max(alpha, 0.0) * 1e6}],
            "device": {"tflops": flops / 1e12, "memory_GB": 16, "memory_bandwidth_GBps": 20,
                       "compute_efficiency": 1}}


def op_times(layer: MoELayer, sync: Optional[object] = None) -> List[Dict[str, Any]]:
    """The last step's ops on this rank (forward, backward, and the GradSync's gradient ops
    when given), measured and simulated, in op order: ``{id, name, phase, chunk, kind,
    measured_ms, simulated_ms}``; each time is the op's duration (on a GPU from CUDA events,
    which reading them here waits for). The simulation runs the layer's schedule on the
    cluster the layer was built for (pass a profiled one)."""
    spans = dict(layer.last_times.spans if layer.last_times else {})  # CUDA events: waits
    if sync is not None and getattr(sync, "last_times", None):
        for times in sync.last_times.values():
            spans.update(times.spans)
    simulated = layer.schedule.simulated_times()
    rows = []
    for op in layer.schedule.ops(layer.rank):
        if op.id not in spans:
            continue
        start, end = spans[op.id]
        s0, s1 = simulated[op.id]
        rows.append({"id": op.id, "name": op.name, "phase": op.phase, "chunk": op.chunk,
                     "kind": op.kind, "measured_ms": (end - start) * 1e3,
                     "simulated_ms": (s1 - s0) * 1e3})
    return rows


def format_op_times(rows: List[Dict[str, Any]]) -> str:
    """``op_times`` as a table."""
    out = [f"{'op':<34} {'phase':<9} {'chunk':>5} {'measured ms':>12} {'simulated ms':>13}"]
    for r in rows:
        out.append(f"{r['name']:<34} {r['phase']:<9} {r['chunk']:>5} {r['measured_ms']:>12.3f} "
                   f"{r['simulated_ms']:>13.3f}")
    return "\n".join(out)
