#!/usr/bin/env python3
"""Smoke check of moecomm.torch on a device (scripts/gpu-check.sh runs it; CI never does: it
has no GPU, and pytest does not collect this file).

MoELayer (python/tests/torch_cases.py's cases) and SampleMovingMoE (torch_netmoe_cases.py's)
run forward, backward and GradSync.step() on WORLD processes that share one GPU, with gloo on
CUDA tensors. Every output and gradient is compared with the same layer's on CPU with gloo
(same weights, inputs and world) to TOLERANCE, relative to the CPU value's magnitude. A case
that needs a library the build lacks (its moecomm.Error says so: FSMoE's planning without
NLopt) is skipped with that reason.
A second run, "nccl-path", takes collectives.py's NCCL-only branch (a direct ReduceScatter of
the ESP cases) over gloo on CUDA: NCCL itself refuses two ranks of one communicator on one GPU
("Duplicate GPU detected"), so the ranks sharing the GPU cannot use it.
NCCL runs on one rank instead: the collectives moecomm.torch issues on NCCL (all_reduce,
all_to_all_single, all_gather, reduce_scatter) with the values they must give,
moecomm.torch.collectives on its group of one, and profile_cluster (its buffers and GEMM are
on the GPU under NCCL only); MoELayer refuses ep = 1, and what it and SampleMovingMoE say is
recorded, as is what NCCL says to two ranks on the GPU. On a machine with WORLD GPUs the cases
also run over NCCL, rank r on GPU r.

Each device run also audits the collectives: a call of torch.distributed whose tensors are not
on the layer's device (NCCL takes CUDA tensors only) is recorded with the moecomm line that
made it, without stopping the run.

Then the forward+backward time of MoELayer (baseline and fsmoe, ep = WORLD, each rank its own
tokens, CUDA events) against a plain one-process PyTorch MoE (softmax gate, top-k, sort by
expert, each expert's FFN, weighted index_add) of the same sizes on all WORLD ranks' tokens:
the same work on the same GPU. The layer's ranks share that GPU and, with gloo, stage every
collective through host memory, so the ratio bounds the layer's overhead from above.

--device cpu runs everything with gloo on CPU, to try the script without a GPU.
MOECOMM_SMOKE_CASES (case names, comma-separated) and MOECOMM_SMOKE_RUNS (gloo-cuda,
gloo-cuda-nccl-path, nccl-cuda) run only those, for a short device session.
"""
from __future__ import annotations

import argparse
import datetime
import inspect
import json
import os
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any, Dict, List, Optional

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import torch_cases  # the torch tests' cases, beside this file
import torch_netmoe_cases

WORLD = 4
TOLERANCE = 1e-5
# Seconds a whole world's run may take before its processes are killed: NCCL may hang at its
# setup when ranks share a GPU.
DEADLINE = {"gloo-cpu": 150, "gloo-cuda": 180, "nccl-cuda": 180}
# A build without NLopt, LEMON or CBC (CMakeLists.txt: MOECOMM_PYTHON_ONLY) says so in its
# moecomm.Error: a case that needs one is skipped, with that reason.
LACKS = "which this build lacks"
COLLECTIVES = ("all_to_all_single", "all_to_all", "all_gather", "all_gather_into_tensor",
               "reduce_scatter", "reduce_scatter_tensor", "all_reduce", "broadcast", "gather",
               "scatter", "send", "recv", "batch_isend_irecv")
# isend and irecv are audited through batch_isend_irecv: P2POp accepts only the real
# functions, so they must stay unwrapped.


def log(*a: Any) -> None:
    print(*a, flush=True)


# --- the collective audit
def _tensors(v: Any) -> List[torch.Tensor]:
    if isinstance(v, torch.Tensor):
        return [v]
    if isinstance(v, (list, tuple)):
        return [t for x in v for t in _tensors(x)]
    if isinstance(v, dist.P2POp):
        return [v.tensor]
    return []


def install_audit(device: torch.device, found: Dict[str, Dict[str, Any]]) -> None:
    """Wraps torch.distributed's collectives: each call with a tensor off ``device`` is
    recorded in ``found`` under the moecomm line that made it."""
    import moecomm
    package = str(Path(moecomm.__file__).parent)
    for name in COLLECTIVES:
        real = getattr(dist, name, None)
        if real is None:
            continue

        def wrapped(*args, _real=real, _name=name, **kwargs):
            off = [t for t in _tensors(list(args) + list(kwargs.values()))
                   if t.device.type != device.type]
            frames = [f for f in traceback.extract_stack()[:-1]
                      if f.filename.startswith(package)] if off else []
            # The settings check (torch/fingerprint.py) puts its tensors on the backend's
            # device (the current GPU under NCCL, the CPU under gloo): not a stray tensor.
            if off and not (frames and frames[-1].filename.endswith("fingerprint.py")):
                # The innermost moecomm line and the two that called it.
                where = " <- ".join(f"{Path(f.filename).parent.name}/{Path(f.filename).name}:"
                                    f"{f.lineno}" for f in frames[::-1][:3])
                where = f"{where} ({frames[-1].line})" if frames else "outside moecomm"
                key = f"{_name} at {where}"
                entry = found.setdefault(key, {"calls": 0, "devices": sorted(
                    {f"{t.device}:{t.dtype}" for t in off})})
                entry["calls"] += 1
            return _real(*args, **kwargs)

        setattr(dist, name, wrapped)


# --- the cases: each returns its outputs and gradients as CPU tensors
def _grads(prefix: str, module: torch.nn.Module, device: torch.device) -> Dict[str, Any]:
    out = {}
    for n, p in module.named_parameters():
        if p.grad is not None:
            if p.grad.device.type != device.type:
                raise RuntimeError(f"{prefix}{n}'s gradient is on {p.grad.device}, the "
                                   f"parameter on {p.device}")
            out[f"grad.{prefix}{n}"] = p.grad.detach().cpu()
    return out


def _on(t: torch.Tensor, device: torch.device, what: str) -> torch.Tensor:
    if t.device.type != device.type:
        raise RuntimeError(f"{what} is on {t.device}, the input on {device}")
    return t.detach().cpu()


def run_moe_case(case: tuple, rank: int, world: int, device: torch.device) -> Dict[str, Any]:
    import moecomm.torch as mt
    name, strategy, parallel, cluster, gate, cf, ffn, k = case
    H, F, E, T = torch_cases.HIDDEN, torch_cases.FFN, torch_cases.EXPERTS, torch_cases.TOKENS
    layer = mt.MoELayer(H, F, E, k, gate=gate, capacity_factor=cf, ffn_type=ffn,
                        strategy=strategy, parallel=parallel, cluster=cluster, tokens=T,
                        seed=7).to(device)
    tp = layer.schedule.parallel["tp"]
    gen = torch.Generator().manual_seed(11)
    xs = [torch.randn(T, H, generator=gen) for _ in range(world // tp)]
    rs = [torch.randn(T, H, generator=gen) for _ in range(world // tp)]
    b = rank // tp
    sync = mt.GradSync([layer], overlap=name not in torch_cases.AFTER_BACKWARD)
    x = xs[b].to(device).requires_grad_()
    out = layer(x)
    (out * rs[b].to(device)).sum().backward()
    sync.step()
    return {"output": _on(out, device, "the output"),
            "input_grad": _on(x.grad, device, "the input's gradient"),
            **_grads("", layer, device)}


def run_netmoe_case(case: tuple, rank: int, world: int, device: torch.device) -> Dict[str, Any]:
    import moecomm.torch as mt
    c = torch_netmoe_cases
    name, strategy, parallel, cluster, gate, ffn, k, blocks, with_targets = case
    layers = [mt.SampleMovingMoE(c.HIDDEN, c.FFN, c.EXPERTS, k, gate=gate, ffn_type=ffn,
                                 strategy=strategy, parallel=parallel, cluster=cluster,
                                 samples=c.SAMPLES, seq_len=c.SEQ, seed=7 + i,
                                 vocab_size=c.VOCAB if with_targets and i == blocks - 1 else None
                                 ).to(device) for i in range(blocks)]
    group, B = layers[0].ep_group, c.SAMPLES
    gen = torch.Generator().manual_seed(11)
    xs = torch.randn(world, B, c.SEQ, c.HIDDEN, generator=gen)
    rs = torch.randn(world, B, c.SEQ, c.HIDDEN, generator=gen)
    targets = torch.randint(0, c.VOCAB, (world, B, c.SEQ), generator=gen)
    h = xs[rank].to(device).requires_grad_()
    y, ids = h, None
    result: Dict[str, Any] = {}
    for i, layer in enumerate(layers):
        out = layer(y, ids, targets[rank].to(device) if layer.moves_targets else None)
        y, ids = out.y, out.sample_ids
        result[f"sample_ids.{i}"] = ids.detach().cpu()
        if layer.moves_targets:
            result[f"targets.{i}"] = _on(out.targets, device, "the moved targets")
    home = [(group[int(g) // B], int(g) % B) for g in ids.cpu()]
    weights = torch.stack([rs[r, s] for r, s in home]) if home else rs[rank, :0]
    (y * weights.to(device)).sum().backward()
    mt.GradSync(layers).step()
    result.update({"output": _on(y, device, "the output"),
                   "input_grad": _on(h.grad, device, "the input's gradient")})
    for i, layer in enumerate(layers):
        result.update(_grads(f"{i}.", layer, device))
    return result


def cases(variant: str = "") -> List[tuple]:
    """(kind, name, case) of every case; of the variant "nccl-path", the cases with an ESP
    ReduceScatter only."""
    out = ([("moe", c[0], c) for c in torch_cases.CASES] +
           [("netmoe", "netmoe:" + c[0], c) for c in torch_netmoe_cases.CASES])
    only = [n for n in os.environ.get("MOECOMM_SMOKE_CASES", "").split(",") if n]
    return [c for c in out if (variant != "nccl-path" or "esp" in c[2][2])
            and (not only or c[1] in only)]


# --- timing
class PlainMoE(torch.nn.Module):
    """One process's MoE of the same math as MoELayer's gshard/gelu path: softmax gate, top-k
    weights renormalised, slots sorted by expert, each expert's FFN on its rows, weighted sum."""

    def __init__(self, hidden: int, ffn: int, experts: int, top_k: int) -> None:
        super().__init__()
        self.top_k, self.experts = top_k, experts
        self.gate = torch.nn.Linear(hidden, experts, bias=False)
        self.w1 = torch.nn.Parameter(torch.randn(experts, hidden, ffn) / hidden ** 0.5)
        self.b1 = torch.nn.Parameter(torch.zeros(experts, ffn))
        self.w2 = torch.nn.Parameter(torch.randn(experts, ffn, hidden) / ffn ** 0.5)
        self.b2 = torch.nn.Parameter(torch.zeros(experts, hidden))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        p = torch.softmax(self.gate(x), dim=-1)
        w, e = torch.topk(p, self.top_k, dim=-1)
        w = w / w.sum(-1, keepdim=True)
        token = torch.arange(x.shape[0], device=x.device).repeat_interleave(self.top_k)
        e, w = e.reshape(-1), w.reshape(-1)
        order = torch.sort(e, stable=True).indices
        token, e, w = token[order], e[order], w[order]
        counts = torch.bincount(e, minlength=self.experts).tolist()
        rows, outs, at = x[token], [], 0
        for j, n in enumerate(counts):
            r = rows[at:at + n]
            hdn = torch.nn.functional.gelu(r @ self.w1[j] + self.b1[j])
            outs.append(hdn @ self.w2[j] + self.b2[j])
            at += n
        y = torch.cat(outs) * w[:, None]
        return x.new_zeros(x.shape).index_add(0, token, y)


def time_steps(step, device: torch.device, warmup: int, repeats: int) -> float:
    """Mean milliseconds of ``step()`` (forward+backward): CUDA events on a GPU."""
    for _ in range(warmup):
        step()
    if device.type == "cuda":
        torch.cuda.synchronize()
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        begin.record()
        for _ in range(repeats):
            step()
        end.record()
        end.synchronize()
        return begin.elapsed_time(end) / repeats
    t = time.perf_counter()
    for _ in range(repeats):
        step()
    return (time.perf_counter() - t) * 1e3 / repeats


def sizes(device: torch.device) -> List[Dict[str, int]]:
    if device.type == "cuda":
        return [dict(hidden=512, ffn=2048, experts=8, tokens=2048),
                dict(hidden=1024, ffn=4096, experts=16, tokens=4096),
                dict(hidden=2048, ffn=8192, experts=8, tokens=4096)]
    return [dict(hidden=32, ffn=64, experts=8, tokens=128),
            dict(hidden=64, ffn=128, experts=8, tokens=256)]


def time_layer(size: Dict[str, int], strategy: str, world: int, device: torch.device,
               repeats: int) -> float:
    import moecomm.torch as mt
    layer = mt.MoELayer(size["hidden"], size["ffn"], size["experts"], 2, strategy=strategy,
                        parallel=f"ep={world}", tokens=size["tokens"], seed=1).to(device)
    x = torch.randn(size["tokens"], size["hidden"], device=device, requires_grad=True)

    def step():
        layer(x).sum().backward()
    return time_steps(step, device, 2, repeats)


def time_plain(size: Dict[str, int], tokens: int, device: torch.device, repeats: int) -> float:
    torch.manual_seed(1)
    layer = PlainMoE(size["hidden"], size["ffn"], size["experts"], 2).to(device)
    x = torch.randn(tokens, size["hidden"], device=device, requires_grad=True)

    def step():
        layer(x).sum().backward()
    return time_steps(step, device, 2, repeats)


# --- one world of processes
def _worker(rank: int, world: int, backend: str, device_name: str, store: str, outdir: str,
            timing: bool, repeats: int, variant: str) -> None:
    torch.set_num_threads(1)
    if variant == "nccl-path":  # collectives.py's NCCL-only branches, run over gloo
        import moecomm.torch.collectives as col
        col.backend_of = lambda group: "nccl"
    device = torch.device(device_name)
    if device.type == "cuda":
        # NCCL: a GPU per rank (run only where there are WORLD); gloo: every rank on GPU 0.
        device = torch.device("cuda", rank if backend == "nccl" else 0)
        torch.cuda.set_device(device)
        torch.backends.cuda.matmul.allow_tf32 = False  # fp32 products, as on CPU
    result: Dict[str, Any] = {"cases": {}, "errors": {}, "audit": {}, "timing": []}
    path = os.path.join(outdir, f"rank{rank}.pt")
    try:
        # NCCL: set up at once on this device (torch >= 2.3), not at the first collective.
        eager = "device_id" in inspect.signature(dist.init_process_group).parameters
        kwargs = {"device_id": device} if backend == "nccl" and eager else {}
        dist.init_process_group(backend, init_method="file://" + store, rank=rank,
                                world_size=world, timeout=datetime.timedelta(seconds=60),
                                **kwargs)
        if backend == "nccl":  # NCCL sets up its communicator at the first collective
            probe = torch.ones(1, device=device)
            dist.all_reduce(probe)
            torch.cuda.synchronize()
        if device.type != "cpu":
            install_audit(device, result["audit"])
        for kind, name, case in cases(variant):
            try:
                run = run_moe_case if kind == "moe" else run_netmoe_case
                result["cases"][name] = run(case, rank, world, device)
            except Exception:  # recorded per case: one failing leaves the others running
                result["errors"][name] = traceback.format_exc(limit=-8)
            if device.type == "cuda":
                torch.cuda.synchronize()
        _save(result, path + ".cases")  # what the parent keeps if the timing runs too long
        if timing:
            for size in sizes(device):
                for strategy in ("baseline", "fsmoe"):
                    try:
                        ms = time_layer(size, strategy, world, device, repeats)
                        result["timing"].append({**size, "strategy": strategy, "ms": ms})
                    except Exception:
                        result["timing"].append({**size, "strategy": strategy,
                                                 "error": traceback.format_exc(limit=-8)})
        dist.destroy_process_group()
    except Exception:
        result["fatal"] = traceback.format_exc(limit=-10)
    _save(result, path)


def _save(result: Dict[str, Any], path: str) -> None:
    torch.save(result, path + ".part")
    os.replace(path + ".part", path)  # whole, once it is there


def _check(out: Dict[str, Dict[str, str]], name: str, fn) -> None:
    """Runs one check of the one-rank NCCL run: ``fn()`` returns (passed, detail), or
    (None, detail) for what is only recorded."""
    try:
        passed, detail = fn()
        status = "recorded" if passed is None else "pass" if passed else "fail"
    except Exception:  # recorded per check: one failing leaves the others running
        status, detail = "fail", _where(traceback.format_exc(limit=-8))
    out[name] = {"status": status, "detail": detail}


def _nccl_one_rank(store: str, path: str) -> None:
    """One rank over NCCL on the GPU: what a world of one can run. The collectives
    moecomm.torch issues on NCCL, with the values they must give; moecomm.torch.collectives on
    its group of one (no NCCL call: the rows come back as they went, on the GPU);
    profile_cluster, whose buffers and GEMM are on the GPU only under NCCL; and what MoELayer
    and SampleMovingMoE say at ep = 1 (they refuse: MoELayer needs ep > 1)."""
    out: Dict[str, Dict[str, str]] = {}
    try:
        device = torch.device("cuda", 0)
        torch.cuda.set_device(device)
        torch.backends.cuda.matmul.allow_tf32 = False
        dist.init_process_group("nccl", init_method="file://" + store, rank=0, world_size=1,
                                timeout=datetime.timedelta(seconds=60))
        x = torch.arange(12, dtype=torch.float32, device=device).reshape(4, 3)

        def same(got: torch.Tensor, want: torch.Tensor, what: str):
            ok = got.device == want.device and torch.equal(got, want)
            return ok, f"{what}: {'equal' if ok else 'DIFFERENT'} ({got.device})"

        def nccl_all_reduce():
            t = x.clone()
            dist.all_reduce(t)
            return same(t, x, "sum over one rank")

        def nccl_all_to_all_single():
            got = torch.empty_like(x)
            dist.all_to_all_single(got, x, [4], [4])
            return same(got, x, "rows back")

        def nccl_all_gather():
            outs = [torch.empty_like(x)]
            dist.all_gather(outs, x)
            return same(outs[0], x, "block back")

        def nccl_reduce_scatter():  # collectives.reduce_scatter_v's NCCL-only call
            got = torch.empty_like(x)
            dist.reduce_scatter(got, [x.clone()])
            return same(got, x, "block summed over one rank")

        def moecomm_collectives():
            import moecomm.torch.collectives as col
            got = [col.all_to_all_v(x, [4], [4], None).wait(),
                   col.all_gather_v(x, [4], None).wait(),
                   col.reduce_scatter_v(x, [4], None).wait(),
                   col.all_reduce(x.clone(), None).wait()]
            ok = all(g.device == x.device and torch.equal(g, x) for g in got)
            return ok, ("all_to_all_v, all_gather_v, reduce_scatter_v, all_reduce give the "
                        f"rows back on {x.device}" if ok else "a function changed the rows")

        def profile():
            import numpy as np
            import moecomm.torch as mt
            try:
                c = mt.profile_cluster(sizes=(1 << 12, 1 << 20), repeats=3, gemm=2048)
            except np.linalg.LinAlgError as e:
                # Its line is fitted to the bytes each rank sends the others: none in a world
                # of one (seen with torch 2.11 on an H100). Recorded, not failed.
                return None, f"LinAlgError at world 1 ({e}): nothing is sent to fit its line"
            tflops = c["device"]["tflops"]
            ok = c["name"] == "torch-nccl-1" and c["levels"][0]["count"] == 1 and tflops > 0
            return ok, f"{c['name']}: fp32 GEMM 2048^3 {tflops:.1f} TFLOP/s"

        for name, fn in (("nccl all_reduce", nccl_all_reduce),
                         ("nccl all_to_all_single", nccl_all_to_all_single),
                         ("nccl all_gather", nccl_all_gather),
                         ("nccl reduce_scatter", nccl_reduce_scatter),
                         ("moecomm.torch.collectives (group of one)", moecomm_collectives),
                         ("profile_cluster over nccl", profile)):
            _check(out, name, fn)
            torch.cuda.synchronize()
        import moecomm.torch as mt
        for name, make in (("MoELayer at ep=1", lambda: mt.MoELayer(16, 32, 8, 2, parallel="ep=1")),
                           ("SampleMovingMoE at ep=1", lambda: mt.SampleMovingMoE(
                               16, 32, 8, 2, parallel="ep=1", samples=2, seq_len=4))):
            def build(make=make):
                try:
                    make()
                    return None, "built"
                except Exception as e:  # the refusal is what this records
                    return None, f"{type(e).__name__}: {e}"
            _check(out, name, build)
        dist.destroy_process_group()
    except Exception:
        out["setup"] = {"status": "fail", "detail": _where(traceback.format_exc(limit=-8))}
    Path(path).write_text(json.dumps(out))


def _shared_gpu_rank(rank: int, store: str, path: str) -> None:
    """Rank ``rank`` of two NCCL ranks on the one GPU: what NCCL says."""
    try:
        torch.cuda.set_device(0)
        dist.init_process_group("nccl", init_method="file://" + store, rank=rank, world_size=2,
                                timeout=datetime.timedelta(seconds=30))
        t = torch.ones(2, device="cuda")
        dist.all_reduce(t)
        torch.cuda.synchronize()
        text = f"ran: all_reduce gave {t.tolist()}"
        dist.destroy_process_group()
    except Exception as e:
        text = " ".join(str(e).split())
        # NCCL's own reason is its "Last error" line.
        text = text[text.find("Last error:"):] if "Last error:" in text else text[:300]
    Path(f"{path}.{rank}").write_text(text)


def _spawned(target, args_of, n: int, deadline: float) -> List[Optional[int]]:
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=target, args=args_of(r)) for r in range(n)]
    for p in procs:
        p.start()
    end = time.time() + deadline
    for p in procs:
        p.join(max(0.0, end - time.time()))
    codes = []
    for p in procs:
        if p.is_alive():
            p.kill()
            p.join()
        codes.append(p.exitcode)
    return codes


def nccl_one_rank(tmp: str) -> Dict[str, Any]:
    """The one-rank NCCL run, then two NCCL ranks sharing the GPU (recorded: NCCL refuses
    two ranks of one communicator on one device, which is why the 4-rank runs use gloo)."""
    start = time.time()
    path = os.path.join(tmp, "nccl-one-rank.json")
    codes = _spawned(_nccl_one_rank, lambda r: (os.path.join(tmp, "store1"), path), 1, 90)
    checks = json.loads(Path(path).read_text()) if os.path.exists(path) else {
        "setup": {"status": "fail", "detail": f"exited with {codes[0]}, saving nothing"}}
    shared = os.path.join(tmp, "shared-gpu")
    _spawned(_shared_gpu_rank, lambda r: (r, os.path.join(tmp, "store2"), shared), 2, 60)
    said = sorted({Path(f"{shared}.{r}").read_text() for r in range(2)
                   if os.path.exists(f"{shared}.{r}")})
    checks["2 nccl ranks on one GPU"] = {"status": "recorded",
                                         "detail": " | ".join(said) or "no rank reported"}
    return {"seconds": round(time.time() - start, 1), "checks": checks}


def run_world(backend: str, device: str, world: int, timing: bool, repeats: int,
              tmp: str, variant: str = "") -> Dict[str, Any]:
    """The cases on ``world`` processes; by rank, what _worker saved, or why there is none."""
    outdir = tempfile.mkdtemp(prefix=f"{backend}-{device}-", dir=tmp)
    store = os.path.join(outdir, "store")
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_worker, args=(r, world, backend, device, store, outdir, timing,
                                               repeats, variant)) for r in range(world)]
    start = time.time()
    deadline = DEADLINE[f"{backend}-{device}"] // (2 if variant else 1)
    for p in procs:
        p.start()
    paths = [os.path.join(outdir, f"rank{r}.pt") for r in range(world)]
    saved_at = None  # a rank that saved its results gets 15 s to exit (NCCL may hang there)
    while any(p.is_alive() for p in procs) and time.time() - start < deadline:
        if saved_at is None and all(os.path.exists(q) for q in paths):
            saved_at = time.time()
        if saved_at is not None and time.time() - saved_at > 15:
            break
        time.sleep(0.5)
    ranks = []
    for r, p in enumerate(procs):
        alive = p.is_alive()
        if alive:
            p.kill()
            p.join()
        saved = [q for q in (paths[r], paths[r] + ".cases") if os.path.exists(q)]
        if saved:
            ranks.append(torch.load(saved[0], weights_only=False))
            if alive and saved[0] != paths[r]:
                ranks[-1]["killed"] = f"rank {r} killed after {deadline} s, in the timing"
            continue
        ranks.append({"fatal": f"rank {r} still running after {deadline} s: killed" if alive
                      else f"rank {r} exited with {p.exitcode} and saved nothing"})
    log(f"  {backend} on {device}: {time.time() - start:.1f} s")
    return {"ranks": ranks, "seconds": time.time() - start}


def compare(got: Dict[str, Any], want: Dict[str, Any]) -> Dict[str, Any]:
    """The largest difference of each tensor, relative to the CPU value's magnitude."""
    if set(got) != set(want):
        return {"status": "mismatch", "detail": f"tensors {sorted(set(got) ^ set(want))} on "
                                                f"one side only"}
    worst, where = 0.0, ""
    for k, w in want.items():
        g = got[k]
        if g.shape != w.shape:
            return {"status": "mismatch", "detail": f"{k}: shape {tuple(g.shape)} vs "
                                                    f"{tuple(w.shape)}"}
        if not w.is_floating_point():
            d = 0.0 if torch.equal(g, w) else float("inf")
        elif w.numel() == 0:
            d = 0.0
        else:
            d = (g - w).abs().max().item() / max(1.0, w.abs().max().item())
        if d > worst or not where:
            worst, where = d, k
    return {"status": "pass" if worst <= TOLERANCE else "mismatch", "max_diff": worst,
            "worst": where}


def _where(tb: str) -> str:
    """A traceback's last line and the innermost file:line it names."""
    lines = tb.strip().splitlines()
    files = [ln.strip() for ln in lines if ln.strip().startswith("File ")]
    return lines[-1] + (f"  [{files[-1]}]" if files else "")


def lacking(ref: Dict[str, Any], case: str) -> str:
    """The error line of a reference case that needs a library this build lacks, or ""."""
    for w in ref["ranks"]:
        e = w.get("errors", {}).get(case, "")
        if LACKS in e:
            return e.strip().splitlines()[-1]
    return ""


def summarize(name: str, run: Dict[str, Any], ref: Dict[str, Any],
              variant: str = "") -> Dict[str, Any]:
    out: Dict[str, Any] = {"seconds": round(run["seconds"], 1), "cases": {}, "audit": {}}
    fatal = [f"rank {r}: {x['fatal']}" for r, x in enumerate(run["ranks"]) if "fatal" in x]
    if fatal:
        out["fatal"] = fatal
    killed = [x["killed"] for x in run["ranks"] if "killed" in x]
    if killed:
        out["killed"] = killed
    for _, case, _ in cases(variant):
        lacks = lacking(ref, case)
        if lacks:
            out["cases"][case] = {"status": "skipped", "reason": lacks}
            continue
        per_rank = []
        for r, (x, w) in enumerate(zip(run["ranks"], ref["ranks"])):
            if "fatal" in x:
                per_rank.append({"status": "no run"})
            elif case in x.get("errors", {}):
                per_rank.append({"status": "error", "error": x["errors"][case]})
            elif case not in w.get("cases", {}):
                per_rank.append({"status": "no reference", "error": w.get("errors", {}).get(
                    case, w.get("fatal", "?"))})
            else:
                per_rank.append(compare(x["cases"][case], w["cases"][case]))
        statuses = sorted({p["status"] for p in per_rank})
        entry: Dict[str, Any] = {"status": statuses[0] if len(statuses) == 1 else
                                 "/".join(statuses)}
        diffs = [p["max_diff"] for p in per_rank if "max_diff" in p]
        if diffs:
            entry["max_diff"] = max(diffs)
        errors = {_where(p["error"]) for p in per_rank if "error" in p}
        if errors:
            entry["errors"] = sorted(errors)
            entry["traceback"] = next(p["error"] for p in per_rank if "error" in p)
        bad = [f"rank {r}: {p}" for r, p in enumerate(per_rank) if p["status"] == "mismatch"]
        if bad:
            entry["mismatch"] = bad[:2]
        out["cases"][case] = entry
    for x in run["ranks"]:
        for k, v in x.get("audit", {}).items():
            a = out["audit"].setdefault(k, {"calls": 0, "devices": v["devices"]})
            a["calls"] += v["calls"]
    return out


def timing_table(run: Dict[str, Any], world: int, device: torch.device,
                 repeats: int) -> List[Dict[str, Any]]:
    rows: Dict[tuple, Dict[str, Any]] = {}
    for x in run["ranks"]:
        for t in x.get("timing", []):
            key = (t["hidden"], t["ffn"], t["experts"], t["tokens"], t["strategy"])
            row = rows.setdefault(key, {k: t[k] for k in ("hidden", "ffn", "experts", "tokens",
                                                          "strategy")})
            if "error" in t:
                row["error"] = t["error"].strip().splitlines()[-1]
            else:
                row["layer_ms"] = max(row.get("layer_ms", 0.0), t["ms"])
    plain: Dict[tuple, float] = {}
    for row in rows.values():
        size = {k: row[k] for k in ("hidden", "ffn", "experts", "tokens")}
        key = tuple(size.values())
        if key not in plain:
            try:
                plain[key] = time_plain(size, world * size["tokens"], device, repeats)
            except Exception:
                plain[key] = float("nan")
                row["plain_error"] = traceback.format_exc(limit=-6)
        row["plain_ms"] = plain[key]
        if "layer_ms" in row:
            row["ratio"] = row["layer_ms"] / plain[key]
    return list(rows.values())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    ap.add_argument("--json", required=True, help="where the summary goes")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--cpu-reason", default="--device cpu",
                    help="with --device cpu: why, for the summary's skipped steps")
    args = ap.parse_args()
    device = torch.device(args.device)
    summary: Dict[str, Any] = {"device": args.device, "world": WORLD, "tolerance": TOLERANCE,
                               "torch": torch.__version__, "runs": {}, "steps": []}
    steps = summary["steps"]
    if device.type == "cuda":
        if not torch.cuda.is_available():
            log("no CUDA device")
            summary["fatal"] = "torch.cuda.is_available() is False"
            steps.append(step("smoke", "failed", summary["fatal"]))
            Path(args.json).write_text(json.dumps(summary, indent=1))
            return 1
        summary["gpu"] = torch.cuda.get_device_name(0)
        v = torch.cuda.nccl.version()
        summary["nccl"] = ".".join(map(str, v)) if isinstance(v, tuple) else str(v)
    log(f"{len(cases())} cases on {WORLD} ranks; reference: gloo on CPU")
    tmp = tempfile.mkdtemp(prefix="gpu-smoke-")
    log("running the reference, gloo on CPU")
    ref = run_world("gloo", "cpu", WORLD, False, args.repeats, tmp)
    skipped = {c: lacking(ref, c) for _, c, _ in cases() if lacking(ref, c)}
    summary["skipped_cases"] = skipped
    summary["reference_errors"] = sorted({f"{c}: {_where(e)}" for x in ref["ranks"]
                                          for c, e in x.get("errors", {}).items()
                                          if c not in skipped} |
                                         {_where(x["fatal"]) for x in ref["ranks"]
                                          if "fatal" in x})
    for e in summary["reference_errors"]:
        log(f"REFERENCE (gloo, CPU) ERROR {e}")
    for reason in sorted(set(skipped.values())):
        log(f"SKIPPED {sum(1 for r in skipped.values() if r == reason)} cases: {reason}")
    ok = not summary["reference_errors"]
    steps.append(step(f"reference: gloo on CPU, {WORLD} ranks",
                      "ok" if ok else "failed",
                      f"{len(cases()) - len(skipped)} cases ran, {ref['seconds']:.0f} s" +
                      (f"; {len(summary['reference_errors'])} errors" if not ok else "") +
                      skipped_note(skipped)))
    # name: (backend, device, variant, what); "nccl-path" runs collectives.py's NCCL-only
    # ReduceScatter over gloo (NCCL refuses ranks that share the GPU: nccl_one_rank).
    # (Debian's torch 1.13 has no gloo ReduceScatter: no "nccl-path" run on CPU.)
    runs = {"gloo-cpu-again": ("gloo", "cpu", "", f"gloo on CPU again, {WORLD} ranks")} \
        if device.type == "cpu" else {
        "gloo-cuda": ("gloo", "cuda", "", f"gloo on CUDA tensors, {WORLD} ranks sharing the GPU"),
        "gloo-cuda-nccl-path": ("gloo", "cuda", "nccl-path",
                                "collectives.py's NCCL-only ReduceScatter over gloo on CUDA")}
    if device.type == "cuda" and torch.cuda.device_count() >= WORLD:
        runs["nccl-cuda"] = ("nccl", "cuda", "", f"NCCL, {WORLD} ranks, a GPU each")
    only = [n for n in os.environ.get("MOECOMM_SMOKE_RUNS", "").split(",") if n]
    for name, (backend, dev, variant, what) in runs.items():
        if only and name not in only:
            continue
        log(f"running {name}")
        run = run_world(backend, dev, WORLD, not variant, args.repeats, tmp, variant)
        s = summarize(name, run, ref, variant)
        if not s.get("fatal") and not variant:
            s["timing"] = timing_table(run, WORLD, device, args.repeats)
        summary["runs"][name] = s
        Path(args.json).write_text(json.dumps(summary, indent=1))
        passed = report(name, s, WORLD)
        ok &= passed
        steps.append(step(what, "ok" if passed else "failed", run_detail(s)))
    if device.type == "cuda":
        log("running NCCL with one rank")
        one = nccl_one_rank(tmp)
        summary["nccl_one_rank"] = one
        passed = report_checks(one)
        ok &= passed
        checks = one["checks"]
        counted = [c for c in checks.values() if c["status"] != "recorded"]
        profile = checks.get("profile_cluster over nccl", {}).get("detail", "")
        steps.append(step("NCCL, 1 rank (collectives, profile_cluster)",
                          "ok" if passed else "failed",
                          f"{sum(c['status'] == 'pass' for c in counted)}/{len(counted)} checks"
                          f" pass; {profile}"))
        for name in ("MoELayer at ep=1", "2 nccl ranks on one GPU"):
            if name in checks:
                steps.append(step(name, "recorded", checks[name]["detail"][:160]))
    else:
        for what in (f"gloo on CUDA tensors, {WORLD} ranks sharing the GPU",
                     "collectives.py's NCCL-only ReduceScatter over gloo on CUDA",
                     "NCCL, 1 rank (collectives, profile_cluster)"):
            steps.append(step(what, "skipped", args.cpu_reason))
    Path(args.json).write_text(json.dumps(summary, indent=1))
    log(f"\nsmoke check: {'everything passed' if ok else 'FAILURES above'}")
    return 0 if ok else 1


def step(name: str, status: str, detail: str) -> Dict[str, str]:
    """One line of gpu-check.sh's closing summary."""
    return {"step": name, "status": status, "detail": detail}


def skipped_note(skipped: Dict[str, str]) -> str:
    if not skipped:
        return ""
    reasons = sorted({r.split(": ")[-1] for r in skipped.values()})
    return f"; {len(skipped)} cases skipped ({'; '.join(reasons)})"


def run_detail(s: Dict[str, Any]) -> str:
    """A run's key numbers: cases passed, the largest difference, audit, one timing row."""
    counted = {k: e for k, e in s["cases"].items() if e["status"] != "skipped"}
    passed = sum(e["status"] == "pass" for e in counted.values())
    diffs = [e["max_diff"] for e in counted.values() if "max_diff" in e]
    text = f"{passed}/{len(counted)} cases within {TOLERANCE:g}"
    if diffs:
        text += f" (max diff {max(diffs):.1e})"
    text += f", {s['seconds']:.0f} s"
    if s.get("fatal"):
        text += f"; FATAL {_where(s['fatal'][0])}"
    if s["audit"]:
        text += f"; {len(s['audit'])} off-device collective calls"
    rows = [t for t in s.get("timing", []) if "layer_ms" in t and t["strategy"] == "baseline"]
    if rows:
        t = rows[0]
        text += (f"; h={t['hidden']} E={t['experts']} T={t['tokens']}/rank baseline "
                 f"{t['layer_ms']:.1f} ms vs plain {t['plain_ms']:.1f} ms")
    return text + skipped_note({k: e["reason"] for k, e in s["cases"].items()
                                if e["status"] == "skipped"})


def report_checks(one: Dict[str, Any]) -> bool:
    log(f"\n== nccl, one rank ({one['seconds']} s)")
    ok = True
    for name, c in one["checks"].items():
        log(f"  {c['status']:<9} {name}: {c['detail']}")
        ok &= c["status"] != "fail"
    return ok


def report(name: str, s: Dict[str, Any], world: int) -> bool:
    """Prints one run's summary; whether everything in it passed."""
    ok = True
    log(f"\n== {name} ({s['seconds']} s)")
    for f in s.get("fatal", []):
        log(f"  FATAL {_where(f)}")
    for k in s.get("killed", []):
        log(f"  KILLED {k}")
    counts: Dict[str, int] = {}
    for case, e in s["cases"].items():
        counts[e["status"]] = counts.get(e["status"], 0) + 1
        diff = f" max diff {e['max_diff']:.2g}" if "max_diff" in e else ""
        log(f"  {e['status']:<9} {case}{diff}")
        for err in e.get("errors", []):
            log(f"      {err}")
        for m in e.get("mismatch", []):
            log(f"      {m}")
    log(f"  totals: {counts}")
    ok &= set(counts) <= {"pass", "skipped"} and not s.get("fatal") and not s.get("killed")
    for k, v in s["audit"].items():
        log(f"  AUDIT off-device tensors ({', '.join(v['devices'])}) in {k}: "
            f"{v['calls']} calls")
    ok &= not s["audit"]
    for t in s.get("timing", []):
        if "layer_ms" in t:
            log(f"  time h={t['hidden']} f={t['ffn']} E={t['experts']} T={t['tokens']}/rank "
                f"{t['strategy']}: layer {t['layer_ms']:.2f} ms, plain MoE on "
                f"{world}x the tokens {t['plain_ms']:.2f} ms, ratio "
                f"{t['ratio']:.2f}")
        else:
            log(f"  time {t}")
    return ok


if __name__ == "__main__":
    sys.exit(main())
