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


def _node_size(world: int, ranks_per_node: Optional[int]) -> int:
    """Ranks per node: given, else the ranks that share this rank's host name (every host
    must hold an equal, contiguous block of ranks, as torchrun and mpirun place them)."""
    if ranks_per_node is None:
        import socket
        hosts: List[Any] = [None] * world
        dist.all_gather_object(hosts, socket.gethostname())
        ranks_per_node = hosts.count(hosts[0])
        blocks = [hosts[r] == hosts[r - r % ranks_per_node] for r in range(world)]
        if world % ranks_per_node or not all(blocks) or len(set(hosts)) != world // ranks_per_node:
            raise ValueError(f"profile_cluster: the hosts {hosts} do not hold equal contiguous "
                             "blocks of ranks; pass ranks_per_node")
    if not (isinstance(ranks_per_node, int) and 1 <= ranks_per_node <= world
            and world % ranks_per_node == 0):
        raise ValueError(f"profile_cluster: ranks_per_node must divide the world size {world}, "
                         f"got {ranks_per_node!r}")
    return ranks_per_node


def _fit_a2a(group, members: int, sizes: Sequence[int], repeats: int, device: torch.device,
             carried: float):
    """(bandwidth_GBps, latency_us) of the link an all_to_all_single over ``group`` crosses,
    every group at once: least squares of the slowest rank's time against the bytes the
    link carries, ``carried`` x a rank's bytes to the other members."""
    points = []
    for size in sizes:
        floats = max(members, size // 4 // members * members)
        send, recv = torch.randn(floats, device=device), torch.empty(floats, device=device)
        t = _timed(lambda: dist.all_to_all_single(recv, send, group=group), repeats, device)
        points.append((carried * floats * 4 * (members - 1) / members, t))
    sent, secs = np.array(points).T
    slope, alpha = np.polyfit(sent, secs, 1)
    return 1 / max(slope, 1e-15) / 1e9, max(alpha, 0.0) * 1e6


def profile_cluster(sizes: Sequence[int] = (1 << 12, 1 << 16, 1 << 20), repeats: int = 5,
                    gemm: int = 256, ranks_per_node: Optional[int] = None) -> Dict[str, Any]:
    """Measures torch.distributed's world as a cluster (collective: every rank calls it), one
    level per node boundary. Ranks per node: ``ranks_per_node``, else the ranks sharing a
    host name. One node, or one rank per node: one level (``proc``) over the world. Else two
    levels, as README "What a level's bandwidth means" defines them: ``gpu`` (count: ranks
    per node), from an ``all_to_all_single`` inside each node, all nodes at once, over a
    rank's bytes to its node peers; ``node`` (count: nodes), from one between the ranks of
    equal local index across nodes, all of them at once, over the bytes a whole node sends
    out (ranks per node x a rank's bytes to other nodes): the node's bandwidth, shared by its
    ranks. Each link is alpha-beta fitted (least squares) to the slowest rank's times over
    ``sizes`` bytes per rank: latency_us = alpha, bandwidth_GBps = bytes carried over
    (time - alpha). The device's fp32 rate is a ``gemm`` x ``gemm`` matmul's. Returns a
    cluster dict (README "Files")."""
    world = dist.get_world_size()
    rank = dist.get_rank()
    # NCCL moves device memory (this line and the next only run on GPUs).
    on_gpu = str(dist.get_backend()).lower() == "nccl"
    device = torch.device("cuda", torch.cuda.current_device()) if on_gpu else torch.device("cpu")
    per_node = _node_size(world, ranks_per_node)
    nodes = world // per_node
    if nodes == 1 or per_node == 1:
        bandwidth, latency = _fit_a2a(None, world, sizes, repeats, device, 1.0)
        levels = [{"name": "proc", "count": world, "bandwidth_GBps": bandwidth,
                   "latency_us": latency}]
    else:
        # Every rank creates every group, in one order (torch.distributed's rule).
        inside = [dist.new_group(list(range(n * per_node, (n + 1) * per_node)))
                  for n in range(nodes)]
        across = [dist.new_group(list(range(k, world, per_node))) for k in range(per_node)]
        gpu_bw, gpu_lat = _fit_a2a(inside[rank // per_node], per_node, sizes, repeats, device,
                                   1.0)
        node_bw, node_lat = _fit_a2a(across[rank % per_node], nodes, sizes, repeats, device,
                                     float(per_node))
        levels = [{"name": "node", "count": nodes, "bandwidth_GBps": node_bw,
                   "latency_us": node_lat},
                  {"name": "gpu", "count": per_node, "bandwidth_GBps": gpu_bw,
                   "latency_us": gpu_lat}]
    a, b = torch.randn(gemm, gemm, device=device), torch.randn(gemm, gemm, device=device)
    flops = 2 * gemm ** 3 / _timed(lambda: a @ b, repeats, device)
    return {"name": f"torch-{dist.get_backend()}-{world}",
            "description": "measured by moecomm.torch.profile_cluster",
            "levels": levels,
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
