#!/usr/bin/env python3
"""HybridEP's SR codec in moecomm.torch (torch ops on the experts' device) against the host
round trip it replaced (python/tests/sr_host_codec.py: every expert tensor through
.cpu().numpy() into moecomm's C++ codec, nn/sr_codec.h, and back), in one run.

One domain of --domain members with --local experts each (gelu FFN experts: w1 [ffn, hidden],
b1, w2 [hidden, ffn], b2). Per step the experts drift (as training moves them), the other
members encode their blocks (torch codec, untimed), and member 0's part of the expert
AllGather is timed with each codec: encode its own experts, decode every member's block into
the domain's copies (the owner's own slots kept exact). Then the shared expert is set from
the sum of all experts (as the backward's AllReduce would), for both alike.

Per (size, compression, shared, feedback) it reports:
  torch_ms, host_ms  encode + decode of member 0, median over the timed steps (perf_counter,
                     after torch.cuda.synchronize on CUDA).
  ratio              host_ms / torch_ms (> 1: the torch codec is faster).
  equal              every timed step's block bytes and decoded copies (their float bits) are
                     the same from both codecs; the run exits 1 otherwise.
  syncs              CUDA only: the host waits and host-device copies in one profiled step
                     of the torch codec (none expected): cudaStreamSynchronize,
                     cudaEventSynchronize, blocking cudaMemcpy, and Memcpy DtoH / HtoD
                     activity (not cudaDeviceSynchronize: the profiler's own, at its stop;
                     cudaMemcpyAsync device to device does not wait); "-" on the CPU.

Run: PYTHONPATH=build/python python3 bench/bench_sr_codec_torch.py [--help]
"""
from __future__ import annotations

import argparse
import copy
import importlib.util
import json
import os
import statistics
import sys
import time
from typing import Dict, List, Sequence, Tuple

import torch

from moecomm.torch.hybrid import SharedResidual

SYNC_EVENTS = {"cudaStreamSynchronize", "cudaEventSynchronize", "cudaMemcpy"}
COPY_EVENTS = ("Memcpy DtoH", "Memcpy HtoD")


def host_codec_class():
    """python/tests/sr_host_codec.py's HostSharedResidual, loaded by path (the test suite
    checks the torch codec against the same class)."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python", "tests",
                        "sr_host_codec.py")
    spec = importlib.util.spec_from_file_location("sr_host_codec", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.HostSharedResidual


def sizes(text: str) -> List[Tuple[int, int]]:
    try:
        out = [tuple(int(v) for v in s.split("x")) for s in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected HIDDENxFFN,..., got '{text}'")
    if not out or any(len(s) != 2 or min(s) < 1 for s in out):
        raise argparse.ArgumentTypeError(f"expected positive HIDDENxFFN,..., got '{text}'")
    return out


def floats(text: str) -> List[float]:
    try:
        out = [float(v) for v in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers, got '{text}'")
    if not out or not all(0 < v <= 1 for v in out):
        raise argparse.ArgumentTypeError(f"expected compressions in (0, 1], got '{text}'")
    return out


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def bits_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and torch.equal(a.contiguous().view(torch.int32),
                                              b.contiguous().view(torch.int32))


def member_step(codec, own: Sequence[torch.Tensor], others: torch.Tensor,
                device: torch.device) -> Tuple[float, torch.Tensor, List[torch.Tensor]]:
    """Member 0's encode and decode, timed: (ms, its block, the copies)."""
    sync(device)
    start = time.perf_counter()
    block = codec.encode(own, 0)
    copies = codec.decode(torch.cat([block.reshape(1, -1), others]), own, 0)
    sync(device)
    return (time.perf_counter() - start) * 1e3, block, copies


def count_syncs(codec, own, others, device) -> int:
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        member_step(codec, own, others, torch.device("cpu"))  # no synchronize of ours
    return sum(1 for e in prof.events()
               if e.name in SYNC_EVENTS or e.name.startswith(COPY_EVENTS))


def run(args, size: Tuple[int, int], compression: float, shared: bool, feedback: bool,
        device: torch.device, host_class) -> Dict:
    hidden, ffn = size
    slots = args.domain * args.local
    shapes = [(ffn, hidden), (ffn,), (hidden, ffn), (hidden,)]
    gen = torch.Generator().manual_seed(1)
    experts = [torch.randn(slots, *s, generator=gen).to(device) for s in shapes]
    codec_args = (compression, shared, feedback, slots, shapes, slots)
    others = [SharedResidual(*codec_args) for _ in range(args.domain)]  # members 1..
    codecs = {"torch": SharedResidual(*codec_args), "host": host_class(*codec_args)}
    times: Dict[str, List[float]] = {"torch": [], "host": []}
    equal, syncs = True, "-"
    for step in range(args.warmup + args.steps):
        experts = [w + 0.01 * torch.randn(w.shape, generator=gen).to(device) for w in experts]
        own = [[w[m * args.local:(m + 1) * args.local] for w in experts]
               for m in range(args.domain)]
        blocks = torch.stack([others[m].encode(own[m], m * args.local)
                              for m in range(1, args.domain)])
        got = {}
        for name in (("torch", "host") if step % 2 else ("host", "torch")):
            got[name] = member_step(codecs[name], own[0], blocks, device)
            if step >= args.warmup:
                times[name].append(got[name][0])
        equal &= torch.equal(got["torch"][1], got["host"][1]) and all(
            bits_equal(a, b) for a, b in zip(got["torch"][2], got["host"][2]))
        if device.type == "cuda" and step == args.warmup + args.steps - 1:
            # On a copy of the codec (its state): the run goes on with the original's.
            syncs = count_syncs(copy.deepcopy(codecs["torch"]), own[0], blocks, device)
        flat = torch.cat([w.sum(0).reshape(-1) for w in experts])
        for c in [*codecs.values(), *others]:
            c.set_shared_sum(flat)
    torch_ms, host_ms = statistics.median(times["torch"]), statistics.median(times["host"])
    return {"hidden": hidden, "ffn": ffn, "compression": compression, "shared": shared,
            "feedback": feedback, "torch_ms": torch_ms, "host_ms": host_ms,
            "ratio": host_ms / torch_ms, "equal": bool(equal), "syncs": syncs}


def main(argv: Sequence[str] = None) -> int:
    parser = argparse.ArgumentParser(
        description="HybridEP's SR codec: moecomm.torch's torch ops against the previous "
                    "numpy/C++ host round trip, encode + decode of one domain member per "
                    "step, ms, ratio and bit equality. See the module docstring.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--sizes", type=sizes, default="64x128,512x1024",
                        help="expert sizes HIDDENxFFN, comma-separated")
    parser.add_argument("--compressions", type=floats, default="0.02,0.3",
                        help="SR compressions (encoded / dense bytes), comma-separated")
    parser.add_argument("--domain", type=int, default=4, help="members of the domain")
    parser.add_argument("--local", type=int, default=2, help="experts per member")
    parser.add_argument("--steps", type=int, default=6, help="timed steps")
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps before them")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                        help="where the experts live (the host codec copies them to the host)")
    parser.add_argument("--threads", type=int, default=0,
                        help="torch.set_num_threads (0: torch's default)")
    parser.add_argument("--json", help="also write the results to this file")
    args = parser.parse_args(argv)
    if args.steps < 1 or args.warmup < 0 or args.domain < 2 or args.local < 1:
        parser.error("--steps and --local must be >= 1, --domain >= 2 and --warmup >= 0")
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: torch sees no CUDA device")
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    host_class = host_codec_class()
    rows = [run(args, size, c, shared, feedback, device, host_class)
            for size in args.sizes for c in args.compressions
            for shared, feedback in ((True, False), (True, True), (False, False))]
    print(f"{args.device}, {torch.get_num_threads()} threads, domain {args.domain} x "
          f"{args.local} experts; member 0's encode + decode per step, median of {args.steps} "
          f"after {args.warmup}; ratio = host / torch")
    head = ("hidden", "ffn", "compression", "shared", "feedback", "torch_ms", "host_ms",
            "ratio", "equal", "syncs")
    print(" ".join(f"{h:>11}" for h in head))
    for r in rows:
        print(" ".join(f"{r[h]:>11.3f}" if isinstance(r[h], float) and h != "compression"
                       else f"{str(r[h]):>11}" for h in head))
    if args.json:
        config = {k: getattr(args, k) for k in ("domain", "local", "steps", "warmup", "device")}
        config.update(sizes=args.sizes, compressions=args.compressions,
                      threads=torch.get_num_threads())
        with open(args.json, "w") as f:
            json.dump({"config": config, "results": rows}, f, indent=1)
    if not all(r["equal"] for r in rows):
        print("bench_sr_codec_torch: the torch codec and the host round trip disagree",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
