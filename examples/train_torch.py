#!/usr/bin/env python3
"""Trains a small MoE language model with moecomm.torch on 4 processes and prints the loss
and per-phase times each step, then the last step's ops beside moecomm's simulation of the
same schedule on the profiled world.

    python3 examples/train_torch.py                       # spawns 4 gloo processes
    python3 -m torch.distributed.run --standalone --nproc_per_node 4 --tee 1 --redirects 2 \\
        examples/train_torch.py                           # one process per rank (torchrun)

On GPUs use --backend nccl with one process per GPU (torchrun sets LOCAL_RANK).
"""
from __future__ import annotations

import argparse
import os
import tempfile

import torch
import torch.distributed as dist
import torch.nn.functional as F


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--strategy", default="fsmoe", help="as `moecomm train --strategy`")
    p.add_argument("--parallel", default="ep=4", help="as `moecomm plan --parallel`")
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--nproc", type=int, default=4, help="processes to spawn (without torchrun)")
    p.add_argument("--hidden", type=int, default=32)
    p.add_argument("--ffn-hidden", type=int, default=64)
    p.add_argument("--experts", type=int, default=8)
    p.add_argument("--top-k", type=int, default=2)
    p.add_argument("--layers", type=int, default=2, help="MoE layers")
    p.add_argument("--tokens", type=int, default=64, help="tokens per rank per step")
    p.add_argument("--vocab", type=int, default=32)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--backend", default="gloo", help="gloo (CPU) or nccl (one GPU per rank)")
    return p.parse_args()


class TinyMoELM(torch.nn.Module):
    """Embedding, MoE layers with residuals, and a vocabulary head."""

    def __init__(self, args: argparse.Namespace, cluster: dict) -> None:
        super().__init__()
        import moecomm.torch as mt
        self.embed = torch.nn.Embedding(args.vocab, args.hidden)
        self.moe = torch.nn.ModuleList(
            mt.MoELayer(args.hidden, args.ffn_hidden, args.experts, args.top_k,
                        strategy=args.strategy, parallel=args.parallel, cluster=cluster,
                        tokens=args.tokens, seed=i)
            for i in range(args.layers))
        self.head = torch.nn.Linear(args.hidden, args.vocab)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens)
        for layer in self.moe:
            x = x + layer(F.layer_norm(x, x.shape[-1:]))
        return self.head(x)


def batch(args: argparse.Namespace, data_rank: int, step: int) -> tuple:
    """A synthetic task: each token's target is a fixed function of it."""
    gen = torch.Generator().manual_seed(1000 * step + data_rank)
    tokens = torch.randint(args.vocab, (args.tokens,), generator=gen)
    return tokens, (tokens * 7 + 3) % args.vocab


def train(rank: int, world: int, args: argparse.Namespace, store: str) -> None:
    import moecomm.torch as mt
    from moecomm.torch.runner import OpTimes
    torch.set_num_threads(1)
    if not dist.is_initialized():
        dist.init_process_group(args.backend, init_method="file://" + store, rank=rank,
                                world_size=world)
    device = torch.device("cpu")
    if args.backend == "nccl":  # GPU only: one device per rank
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", rank)))
        torch.cuda.set_device(device)
    cluster = mt.profile_cluster()
    torch.manual_seed(0)  # the dense weights start equal on every rank
    model = TinyMoELM(args, cluster).to(device)
    sync = mt.GradSync(list(model.moe), dense=[model.embed.weight, *model.head.parameters()],
                       average=True)
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    tp = model.moe[0].schedule.parallel["tp"]
    if rank == 0:
        print(f"strategy {model.moe[0].strategy}\nlayout {model.moe[0].schedule.parallel} on "
              f"{world} ranks, cluster {cluster['name']}: "
              f"{cluster['levels'][0]['bandwidth_GBps']:.3g} GB/s, "
              f"{cluster['levels'][0]['latency_us']:.3g} us, "
              f"{cluster['device']['tflops'] * 1e3:.3g} Gflop/s")
        print(f"{'step':>4} {'loss':>8} {'forward ms':>11} {'backward ms':>12} "
              f"{'grad sync ms':>13} {'a2a ms':>8}", flush=True)
    for step in range(args.steps):
        tokens, targets = (t.to(device) for t in batch(args, rank // tp, step))
        # The phases' times: CUDA events on a GPU (its kernels run asynchronously), the host's
        # clock on CPU; read after the step (the loss's .item() waits for it anyway).
        clock = OpTimes(device)
        t0 = clock.now()
        loss = F.cross_entropy(model(tokens), targets)
        t1 = clock.now()
        opt.zero_grad()
        loss.backward()
        t2 = clock.now()
        sync.step()
        t3 = clock.now()
        opt.step()
        for phase, (start, end) in enumerate([(t0, t1), (t1, t2), (t2, t3)]):
            clock.record(phase, start, end)
        phases = [end - start for start, end in clock.spans.values()]
        a2a = sum(e - s for layer in model.moe for i, (s, e) in layer.last_times.spans.items()
                  if layer.schedule_op(i).kind == "all_to_all")
        total = torch.tensor([loss.item()], device=device)
        dist.all_reduce(total)
        if rank == 0:
            print(f"{step:>4} {total.item() / world:>8.4f} {phases[0] * 1e3:>11.2f} "
                  f"{phases[1] * 1e3:>12.2f} {phases[2] * 1e3:>13.2f} {a2a * 1e3:>8.2f}",
                  flush=True)
    rows = mt.op_times(model.moe[0], sync)
    if rank == 0:
        print("\nlast step, rank 0, MoE layer 0: measured beside moecomm's simulation "
              "on the profiled cluster")
        print(mt.format_op_times(rows), flush=True)
    dist.destroy_process_group()


def main() -> None:
    args = parse_args()
    if "RANK" in os.environ:  # launched by torch.distributed.run
        dist.init_process_group(args.backend)
        train(dist.get_rank(), dist.get_world_size(), args, "")
        return
    import torch.multiprocessing as mp
    store = tempfile.mktemp(prefix="moecomm-store-")
    mp.spawn(train, args=(args.nproc, args, store), nprocs=args.nproc)


if __name__ == "__main__":
    main()
