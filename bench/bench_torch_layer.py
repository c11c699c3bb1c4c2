#!/usr/bin/env python3
"""moecomm.torch.MoELayer against a plain expert-parallel layer, on 4 ranks in one run.

The plain layer is written here with torch alone (no moecomm code): Megatron-style expert
parallelism with the same math as MoELayer's gshard gate and gelu experts: softmax gate,
top-k, weights renormalised over the chosen; one stable sort of the slots by expert; counts
by bincount, exchanged with one small all_to_all_single; one all_to_all_single of the rows
each way with uneven splits; the local experts on their rows; unpermute and the weighted sum.
Both layers get the same weights (the plain layer's experts go into MoELayer through
MoELayer.load_experts, its gate weight into MoELayer.gate_weight), so their outputs and
gradients are compared on every run: `max_diff_out` and `max_diff_grad` (input and gate
weight gradients), absolute, max over ranks.

Per (experts, strategy) it reports:
  plain_ms, moe_ms  wall time of one forward+backward step (perf_counter on CPU, CUDA events
                    on CUDA): median over the timed steps on each rank, max over the ranks.
                    The two layers' steps alternate, each after a barrier.
  ratio             moe_ms / plain_ms.
  aten_ops          profiler events (torch.profiler, one extra step) named "aten::*", nested
                    ones included (an aten op calling another counts twice).
  kernel_launches   CUDA: "cudaLaunchKernel"/"cuLaunchKernel" runtime events. CPU: leaf aten
                    ops (no aten op below them) that are not metadata-only (views, reshapes,
                    empty allocations, detach: METADATA_OPS) - the ops a GPU would launch
                    kernels for.
  host_syncs        CUDA: cudaStreamSynchronize, cudaDeviceSynchronize, cudaEventSynchronize
                    and (blocking) cudaMemcpy events. CPU: the tensor calls that make the host
                    wait for the device on a GPU (a device -> host read, or a result whose size
                    depends on the data): tolist, item, cpu, to("cpu"), nonzero, unique,
                    masked_select, argwhere, bincount, repeat_interleave by a tensor without
                    output_size, and bool/int/float/index of a tensor, counted by a
                    TorchFunctionMode during the profiled step (SYNC_CALLS).
The counts are per step, max over the ranks. On a shared CPU machine the times are noisy.

Run: PYTHONPATH=build/python python3 bench/bench_torch_layer.py [--help]
"""
from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import statistics
import sys
import tempfile
import time
import traceback
from typing import Any, Dict, List, Sequence, Tuple

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

WORLD = 4
TOP_K = 2
METADATA_OPS = frozenset(
    "aten::" + n for n in (
        "view", "reshape", "_reshape_alias", "as_strided", "t", "transpose", "permute",
        "expand", "slice", "select", "unsqueeze", "squeeze", "narrow", "split",
        "split_with_sizes", "unbind", "chunk", "detach", "alias", "lift", "empty",
        "empty_like", "empty_strided", "resize_", "unsafe_view", "_unsafe_view",
        "numpy_T", "lift_fresh", "result_type"))
CUDA_LAUNCHES = ("cudaLaunchKernel", "cuLaunchKernel")
CUDA_SYNCS = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize",
              "cudaMemcpy")
SYNC_CALLS = frozenset(("tolist", "item", "cpu", "nonzero", "unique", "masked_select",
                        "argwhere", "bincount", "__bool__", "__int__", "__float__", "__index__"))


# --- the plain layer (torch only)
class _AllToAll(torch.autograd.Function):
    """all_to_all_single of rows with uneven splits; its gradient is the reverse exchange."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, out_splits: List[int], in_splits: List[int]):
        ctx.splits = (out_splits, in_splits)
        out = x.new_empty((sum(out_splits),) + tuple(x.shape[1:]))
        dist.all_to_all_single(out, x.contiguous(), out_splits, in_splits)
        return out

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        out_splits, in_splits = ctx.splits
        back = grad.new_empty((sum(in_splits),) + tuple(grad.shape[1:]))
        dist.all_to_all_single(back, grad.contiguous(), in_splits, out_splits)
        return back, None, None


class PlainEP(torch.nn.Module):
    """Expert parallel over the default group: rank r owns experts [r L, (r + 1) L)."""

    def __init__(self, gate_weight: torch.Tensor, experts: Dict[str, torch.Tensor],
                 top_k: int) -> None:
        super().__init__()
        self.world, self.rank = dist.get_world_size(), dist.get_rank()
        self.experts, self.top_k = gate_weight.shape[0], top_k
        self.local = self.experts // self.world
        mine = slice(self.rank * self.local, (self.rank + 1) * self.local)
        self.gate_weight = torch.nn.Parameter(gate_weight.clone())
        for name in ("w1", "b1", "w2", "b2"):
            setattr(self, name, torch.nn.Parameter(experts[name][mine].clone()))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        k, w, l = self.top_k, self.world, self.local
        scores = x @ self.gate_weight.t()
        probs = torch.softmax(scores, dim=-1)
        chosen = torch.topk(scores, k, dim=-1).indices
        weight = probs.gather(1, chosen)
        weight = (weight / weight.sum(dim=-1, keepdim=True)).reshape(-1)
        expert = chosen.reshape(-1)  # slot s = token s // k
        perm = torch.sort(expert, stable=True).indices
        token = perm // k
        counts = torch.bincount(expert, minlength=self.experts)
        recv_counts = torch.empty_like(counts)
        dist.all_to_all_single(recv_counts, counts)  # [source, local expert]
        send_splits = counts.reshape(w, l).sum(1).tolist()
        recv_splits = recv_counts.reshape(w, l).sum(1).tolist()
        rows = _AllToAll.apply(x[token], recv_splits, send_splits)
        # Rows arrive source-major; group them by local expert.
        local_expert = torch.arange(l, device=x.device).repeat(w).repeat_interleave(recv_counts)
        order = torch.sort(local_expert, stable=True).indices
        per_expert = recv_counts.reshape(w, l).sum(0).tolist()
        grouped = rows[order].split(per_expert)
        y = torch.cat([F.gelu(g @ self.w1[e].t() + self.b1[e]) @ self.w2[e].t() + self.b2[e]
                       for e, g in enumerate(grouped)])
        unsorted = torch.empty_like(order)
        unsorted[order] = torch.arange(order.numel(), device=x.device)
        back = _AllToAll.apply(y[unsorted], send_splits, recv_splits)
        return x.new_zeros(x.shape).index_add(0, token, back * weight[perm][:, None])


# --- measuring
def strategy_list(text: str) -> List[Tuple[str, str]]:
    """"baseline,fsmoe:chunks=4,lina" -> [(label, MoELayer strategy)]: a "k=v" item without
    ":" continues the strategy before it ("fsmoe:chunks=4,a2a=1dh")."""
    items: List[List[str]] = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            raise SystemExit(f"--strategies: empty item in '{text}'")
        if "=" in part and ":" not in part:
            if not items:
                raise SystemExit(f"--strategies: '{part}' has no strategy before it")
            items[-1].append(part)
        else:
            items.append([part])
    out = []
    for item in items:
        base, _, first = item[0].partition(":")
        knobs = [k for k in [first] + item[1:] if k]
        label = base + (":" + ",".join(knobs) if knobs else "")
        out.append((label, ",".join([f"base={base}"] + knobs) if knobs else base))
    return out


def expert_weights(experts: int, hidden: int, ffn: int, seed: int) -> Tuple[torch.Tensor,
                                                                            Dict[str, torch.Tensor]]:
    """Gate weight and every expert's weights (torch.nn.Linear's layout), the same on every
    rank."""
    gen = torch.Generator().manual_seed(seed)
    rand = lambda *shape, fan: (torch.rand(*shape, generator=gen) * 2 - 1) / math.sqrt(fan)
    gate = rand(experts, hidden, fan=hidden)
    return gate, {"w1": rand(experts, ffn, hidden, fan=hidden), "b1": rand(experts, ffn, fan=hidden),
                  "w2": rand(experts, hidden, ffn, fan=ffn), "b2": rand(experts, hidden, fan=ffn)}


class Timer:
    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"

    def __call__(self, fn) -> float:
        """Milliseconds fn() takes."""
        if self.cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda.synchronize()
            start.record()
            fn()
            end.record()
            torch.cuda.synchronize()
            return start.elapsed_time(end)
        t0 = time.perf_counter()
        fn()
        return (time.perf_counter() - t0) * 1e3


def count_events(events, cuda: bool) -> Dict[str, int]:
    aten = [e for e in events if e.name.startswith("aten::")]
    if cuda:
        launches = sum(e.name in CUDA_LAUNCHES for e in events)
    else:
        leaves = [e for e in aten
                  if not any(c.name.startswith("aten::") for c in e.cpu_children)]
        launches = sum(e.name not in METADATA_OPS for e in leaves)
    out = {"aten_ops": len(aten), "kernel_launches": launches}
    if cuda:
        out["host_syncs"] = sum(e.name in CUDA_SYNCS for e in events)
    return out


class SyncCalls(TorchFunctionMode):
    """Counts the tensor calls of SYNC_CALLS (the CPU's stand-in for a GPU's host syncs)."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        if name in SYNC_CALLS or (name == "to" and "cpu" in [str(a) for a in args[1:]]
                                      and not kwargs.get("non_blocking")) or (
                name == "repeat_interleave" and len(args) > 1
                and isinstance(args[1], torch.Tensor) and "output_size" not in kwargs):
            self.count += 1
        return func(*args, **kwargs)


def profile_step(step, cuda: bool) -> Dict[str, int]:
    """One step under torch.profiler (and, on CPU, SyncCalls)."""
    from torch.profiler import ProfilerActivity, profile
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    syncs = SyncCalls()
    with profile(activities=activities) as prof:
        if cuda:
            step()
            torch.cuda.synchronize()
        else:
            with syncs:
                step()
    out = count_events(prof.events(), cuda)
    if not cuda:
        out["host_syncs"] = syncs.count
    return out


def max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return (a.detach() - b.detach()).abs().max().item() if a.numel() else 0.0


def run_rank(rank: int, args: argparse.Namespace, store: str, outdir: str) -> None:
    try:
        result = measure(rank, args, store)
    except Exception:
        result = {"error": traceback.format_exc()}
    with open(os.path.join(outdir, f"rank{rank}.json"), "w") as f:
        json.dump(result, f)


def log(rank: int, text: str) -> None:
    if rank == 0:
        print(f"[bench_torch_layer] {text}", file=sys.stderr, flush=True)


def measure(rank: int, args: argparse.Namespace, store: str) -> Dict[str, Any]:
    torch.set_num_threads(1)
    cuda = args.device == "cuda"
    if cuda:
        torch.cuda.set_device(rank % torch.cuda.device_count())
    device = torch.device("cuda", torch.cuda.current_device()) if cuda else torch.device("cpu")
    dist.init_process_group("nccl" if cuda else "gloo", init_method="file://" + store,
                            rank=rank, world_size=WORLD, timeout=datetime.timedelta(seconds=300))
    from moecomm.torch import MoELayer
    timer = Timer(device)
    gen = torch.Generator().manual_seed(1000 + rank)
    x0 = torch.randn(args.tokens, args.hidden, generator=gen).to(device)
    probe = torch.randn(args.tokens, args.hidden, generator=gen).to(device)
    rows = []
    for experts in args.experts:
        gate, full = expert_weights(experts, args.hidden, args.ffn, seed=experts)
        plain = PlainEP(gate, full, TOP_K).to(device)
        for label, strategy in args.strategies:
            log(rank, f"experts={experts} strategy={label}: building")
            moe = MoELayer(args.hidden, args.ffn, experts, TOP_K, strategy=strategy,
                           parallel=f"ep={WORLD}", tokens=args.tokens)
            moe.load_experts(full)
            with torch.no_grad():
                moe.gate_weight.copy_(gate)
            moe.to(device)
            layers = {"plain": plain, "moe": moe}
            inputs, outputs = {}, {}

            def step(name: str) -> None:
                layer = layers[name]
                layer.zero_grad(set_to_none=True)
                x = x0.clone().requires_grad_()
                out = layer(x)
                (out * probe).sum().backward()
                inputs[name], outputs[name] = x, out

            # Both layers on the same weights and tokens: outputs and gradients agree.
            step("plain")
            step("moe")
            diff_out = max_diff(outputs["plain"], outputs["moe"])
            diff_grad = max(max_diff(inputs["plain"].grad, inputs["moe"].grad),
                            max_diff(plain.gate_weight.grad, moe.gate_weight.grad))
            log(rank, f"experts={experts} strategy={label}: warmup {args.warmup}, "
                      f"steps {args.steps}")
            times: Dict[str, List[float]] = {"plain": [], "moe": []}
            for i in range(args.warmup + args.steps):
                for name in ("plain", "moe"):
                    dist.barrier()
                    ms = timer(lambda: step(name))
                    if i >= args.warmup:
                        times[name].append(ms)
            counts = {}
            for name in ("plain", "moe"):
                dist.barrier()
                counts[name] = profile_step(lambda: step(name), cuda)
            rows.append({"experts": experts, "strategy": label, "moe_strategy": strategy,
                         "plain_ms": statistics.median(times["plain"]),
                         "moe_ms": statistics.median(times["moe"]),
                         "plain": counts["plain"], "moe": counts["moe"],
                         "max_diff_out": diff_out, "max_diff_grad": diff_grad})
            del moe, layers
    dist.barrier()
    dist.destroy_process_group()
    return {"rows": rows}


def combine(per_rank: Sequence[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """Max over the ranks of every figure; ratio of the maxima."""
    out = []
    for rows in zip(*(r["rows"] for r in per_rank)):
        row = {k: rows[0][k] for k in ("experts", "strategy", "moe_strategy")}
        for k in ("plain_ms", "moe_ms", "max_diff_out", "max_diff_grad"):
            row[k] = max(r[k] for r in rows)
        row["ratio"] = row["moe_ms"] / row["plain_ms"]
        for layer in ("plain", "moe"):
            row[layer] = {k: max(r[layer][k] for r in rows) for k in rows[0][layer]}
        out.append(row)
    return out


def table(rows: Sequence[Dict[str, Any]]) -> str:
    head = ("experts", "strategy", "plain ms", "MoELayer ms", "ratio", "aten ops p/m",
            "launches p/m", "syncs p/m", "max diff out/grad")
    lines = [head]
    for r in rows:
        p, m = r["plain"], r["moe"]
        lines.append((str(r["experts"]), r["strategy"], f"{r['plain_ms']:.2f}",
                      f"{r['moe_ms']:.2f}", f"{r['ratio']:.2f}",
                      f"{p['aten_ops']}/{m['aten_ops']}",
                      f"{p['kernel_launches']}/{m['kernel_launches']}",
                      f"{p['host_syncs']}/{m['host_syncs']}",
                      f"{r['max_diff_out']:.1e}/{r['max_diff_grad']:.1e}"))
    widths = [max(len(l[i]) for l in lines) for i in range(len(head))]
    fmt = lambda l: "| " + " | ".join(c.ljust(w) for c, w in zip(l, widths)) + " |"
    sep = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
    return "\n".join([fmt(lines[0]), sep] + [fmt(l) for l in lines[1:]])


def positive_ints(text: str) -> List[int]:
    try:
        values = [int(v) for v in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got '{text}'")
    if not values or min(values) <= 0:
        raise argparse.ArgumentTypeError(f"expected positive integers, got '{text}'")
    return values


def main(argv: Sequence[str] = None) -> int:
    parser = argparse.ArgumentParser(
        description="MoELayer against a plain expert-parallel torch layer on 4 ranks: ms per "
                    "forward+backward step, ratio, aten ops, kernel launches and host syncs "
                    "per step. See the module docstring for what is counted.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--experts", type=positive_ints, default=[8, 64, 256],
                        help="expert counts, comma-separated (each a multiple of 4)")
    parser.add_argument("--strategies", type=strategy_list,
                        default=strategy_list("baseline,fsmoe:chunks=4,lina"),
                        help="strategies, comma-separated; name:knob=v,knob=v as "
                             "base=name,knob=v,knob=v for MoELayer")
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--ffn", type=int, default=256)
    parser.add_argument("--tokens", type=int, default=512, help="tokens per rank")
    parser.add_argument("--steps", type=int, default=10, help="timed steps")
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps before them")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                        help="cpu: gloo; cuda: nccl, rank r on GPU r %% device count")
    parser.add_argument("--json", help="also write the results to this file")
    args = parser.parse_args(argv)
    if any(e % WORLD for e in args.experts[0:]):
        parser.error(f"--experts: each must be a multiple of the {WORLD} ranks")
    if args.steps < 1 or args.warmup < 0 or args.tokens < 1 or args.hidden < 1 or args.ffn < 1:
        parser.error("--steps, --tokens, --hidden, --ffn must be >= 1 and --warmup >= 0")
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: torch sees no CUDA device")

    import torch.multiprocessing as mp
    with tempfile.TemporaryDirectory(prefix="bench_torch_layer-") as tmp:
        mp.spawn(run_rank, args=(args, os.path.join(tmp, "store"), tmp), nprocs=WORLD)
        per_rank = [json.load(open(os.path.join(tmp, f"rank{r}.json"))) for r in range(WORLD)]
    errors = [(r, got["error"]) for r, got in enumerate(per_rank) if "error" in got]
    if errors:
        for r, text in errors:
            print(f"bench_torch_layer: rank {r} failed:\n{text}", file=sys.stderr)
        return 1
    rows = combine(per_rank)
    print(f"{WORLD} ranks, {args.device}, hidden {args.hidden}, ffn {args.ffn}, "
          f"{args.tokens} tokens per rank, top-{TOP_K} gshard, gelu experts; "
          f"{args.steps} timed steps after {args.warmup}; ms: median over steps, max over "
          f"ranks; p/m: plain/MoELayer per step")
    print(table(rows))
    if args.json:
        config = {k: getattr(args, k) for k in ("hidden", "ffn", "tokens", "steps", "warmup",
                                                "device", "experts")}
        config.update(world=WORLD, top_k=TOP_K, strategies=[s for s, _ in args.strategies])
        with open(args.json, "w") as f:
            json.dump({"config": config, "results": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
