"""moecomm.torch under faults, on 4 gloo processes: the timeout every process group it creates
gets, the errors of a bad timeout, of a second GradSync.step() without a backward, what
GradSync does with a frozen parameter, and the error a stalled or dead rank's peers get."""
from __future__ import annotations

import datetime
import json
import math
import os
import time
from typing import Any, Callable, Dict, List

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from torch_spawn import WORLD, guarded, run_on_ranks

# The default group's timeout, as torch_spawn's init_process_group sets it.
INIT_TIMEOUT_S = 60.0

BAD_TIMEOUTS = {
    "zero": 0,
    "negative": -1.5,
    "nan": float("nan"),
    "inf": math.inf,
    "zero-timedelta": datetime.timedelta(0),
    "str": "5",
    "bool": True,
}


def _group_timeouts(layer: Any, rank: int) -> List[List[Any]]:
    """[ranks, the group's timeout in seconds (None: the default group)] per group holding
    ``rank`` (new_group gives the others a placeholder)."""
    from moecomm.torch.groups import group_timeout
    out = []
    for ranks, g in sorted(layer.groups.registry._groups.items()):
        if rank in ranks:
            t = None if g is None else group_timeout(g)
            out.append([list(ranks), None if t is None else t.total_seconds()])
    return out


def _loss(layer: Any, rank: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(100 + rank)
    x = torch.randn(8, 16, generator=gen)
    r = torch.randn(8, 16, generator=gen)
    return (layer(x) * r).sum()


def _error(fn) -> Any:
    import moecomm
    try:
        fn()
        return None
    except moecomm.Error as e:
        return str(e)


def run_rank(rank: int) -> Dict[str, Any]:
    import moecomm.torch as mt
    from moecomm.torch.groups import group_timeout
    out: Dict[str, Any] = {"default": group_timeout().total_seconds()}
    # Timeouts reach the groups.
    out["seconds"] = _group_timeouts(mt.MoELayer(16, 32, 8, parallel="ep=2", timeout=5), rank)
    out["timedelta"] = _group_timeouts(mt.MoELayer(
        16, 32, 8, parallel="ep=2", timeout=datetime.timedelta(seconds=7.5)), rank)
    out["unset"] = _group_timeouts(mt.MoELayer(16, 32, 8, parallel="ep=2"), rank)
    out["netmoe"] = _group_timeouts(mt.SampleMovingMoE(16, 32, 8, parallel="ep=2", timeout=3),
                                    rank)
    # Bad timeouts.
    for name, value in BAD_TIMEOUTS.items():
        out[f"bad-{name}"] = _error(lambda: mt.MoELayer(16, 32, 8, parallel="ep=2",
                                                        timeout=value))
    out["bad-netmoe"] = _error(lambda: mt.SampleMovingMoE(16, 32, 8, parallel="ep=2",
                                                          timeout=-1))
    # A second step() without a backward, with and without overlap; a step() with no backward.
    for overlap in (True, False):
        layer = mt.MoELayer(16, 32, 8, parallel="ep=2")
        sync = mt.GradSync([layer], overlap=overlap)
        out[f"fresh-step-{overlap}"] = _error(sync.step)
        _loss(layer, rank).backward()
        sync.step()
        after = [p.grad.clone() for p in layer.parameters()]
        out[f"double-step-{overlap}"] = _error(sync.step)
        out[f"unchanged-{overlap}"] = all(bool((p.grad == a).all())
                                          for p, a in zip(layer.parameters(), after))
        _loss(layer, rank).backward()  # the next step runs again
        out[f"next-step-{overlap}"] = _error(sync.step)
    # Built after the backward: its first step takes the gradients there, a second raises.
    layer = mt.MoELayer(16, 32, 8, parallel="ep=2")
    _loss(layer, rank).backward()
    sync = mt.GradSync([layer])
    out["late-first"] = _error(sync.step)
    out["late-second"] = _error(sync.step)
    # A frozen gate: skipped, and the experts' gradients are those of the unfrozen layer.
    results = {}
    for frozen in (False, True):
        layer = mt.MoELayer(16, 32, 8, parallel="ep=2", seed=3)
        layer.gate_weight.requires_grad_(not frozen)
        extra = torch.nn.Parameter(torch.ones(3), requires_grad=False)
        sync = mt.GradSync([layer], dense=[extra])
        _loss(layer, rank).backward()
        sync.step()
        results[frozen] = layer
    frozen, live = results[True], results[False]
    out["frozen-gate-grad"] = None if frozen.gate_weight.grad is None else "set"
    out["frozen-expert-diff"] = max((a.grad - b.grad).abs().max().item() for a, b in
                                    zip(frozen.expert_params(), live.expert_params()))
    out["live-gate-grad"] = None if live.gate_weight.grad is None else "set"
    # Every parameter frozen: nothing to synchronize, step() does nothing.
    layer = mt.MoELayer(16, 32, 8, parallel="ep=2")
    for p in layer.parameters():
        p.requires_grad_(False)
    sync = mt.GradSync([layer])
    out["all-frozen"] = _error(lambda: (sync.step(), sync.step()))
    out["all-frozen-grads"] = [p.grad is None for p in layer.parameters()]
    return out


def run_all(outdir: str) -> List[Dict[str, Any]]:
    return run_on_ranks(run_rank, outdir)


# A stalled or dead rank: the layers' timeout, the stalled rank's sleep (well past two of
# them: its peers fail twice by the timeout, not by its return), the bound on a failure past the timeout
# (a loaded machine), and every spawned process's hard deadline.
TIMEOUT_S = 3.0
STALL_S = 2 * TIMEOUT_S + 6.0
MARGIN_S = 5.0
DEADLINE_S = 150.0
FAULTY = 3  # the rank that stalls or dies


def run_with_deadline(fn: Callable[[int], Dict[str, Any]], outdir: str
                      ) -> List[Dict[str, Any]]:
    """``fn(rank)`` on 4 spawned gloo processes, each killed if still running DEADLINE_S
    after the start (a hang fails the test instead of the suite). Unlike mp.spawn, a rank
    that exits early (one made to die) leaves the others running. Per rank: what ``fn``
    returned (None if it wrote nothing), its exit code, and whether it overran."""
    ctx = mp.get_context("spawn")
    store = os.path.join(outdir, "store")
    procs = [ctx.Process(target=_deadline_worker, args=(rank, store, outdir, fn), daemon=True)
             for rank in range(WORLD)]
    end = time.monotonic() + DEADLINE_S
    for p in procs:
        p.start()
    out = []
    for rank, p in enumerate(procs):
        p.join(max(0.0, end - time.monotonic()))
        overran = p.is_alive()
        if overran:
            p.kill()
            p.join()
        path = os.path.join(outdir, f"rank{rank}.json")
        result = json.load(open(path)) if os.path.exists(path) else None
        out.append({"result": result, "exitcode": p.exitcode, "overran": overran})
    return out


def _deadline_worker(rank: int, store: str, outdir: str, fn: Callable) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method="file://" + store, rank=rank,
                            world_size=WORLD, timeout=datetime.timedelta(seconds=INIT_TIMEOUT_S))
    result = guarded(fn, rank)
    with open(os.path.join(outdir, f"rank{rank}.json"), "w") as f:
        json.dump(result, f)
    # Its peers may be dead or failed: no teardown that could wait on them.
    os._exit(0)


def _failure(run: Callable[[], Any]) -> Dict[str, Any]:
    """``run()``'s moecomm.Error (message, the backend's exception it chains) and the
    seconds until it ended."""
    import moecomm
    start = time.perf_counter()
    try:
        run()
        error = None
    except moecomm.Error as e:
        error = {"message": str(e), "cause": str(e.__cause__),
                 "cause_type": type(e.__cause__).__name__}
    return {"error": error, "seconds": time.perf_counter() - start}


def _collectives(layer: Any, rank: int) -> Dict[str, List[int]]:
    """This rank's collective ops as errors name them, and the world ranks of each's
    group (the gate op's: its layout AllGather's, over the EP group)."""
    from moecomm.torch.runner import op_label
    out = {}
    for o in layer.schedule.ops(rank):
        if o.collective >= 0:
            out[op_label(o)] = sorted(int(r) for r in layer.schedule.collective(o.collective).group)
    for o in layer.gate_ops.values():
        out[op_label(o)] = sorted(int(r) for r in layer.ep_group)
    return out


def run_stall(rank: int) -> Dict[str, Any]:
    """Two ep=4 layers with the timeout (their A2As span the world, so they run on groups
    made with it, not on the default group); every rank runs the second's forward, then
    rank FAULTY sleeps past twice the timeout while the others run the first layer's
    forward and the second's backward: each fails by the timeout, the forward in its layout
    AllGather, the backward in an op the runner runs. FAULTY then finds its peers gone."""
    import moecomm.torch as mt
    first, second = (mt.MoELayer(16, 32, 8, parallel="ep=4", timeout=TIMEOUT_S)
                     for _ in range(2))
    loss = _loss(second, rank)
    if rank == FAULTY:
        time.sleep(STALL_S)
    return {"forward": _failure(lambda: first(torch.randn(8, 16))),
            "backward": _failure(loss.backward),
            "ops": {**_collectives(first, rank), **_collectives(second, rank)}}


def run_killed(rank: int) -> Dict[str, Any]:
    """As run_stall, but rank FAULTY dies before its forward."""
    import moecomm.torch as mt
    layer = mt.MoELayer(16, 32, 8, parallel="ep=4", timeout=TIMEOUT_S)
    if rank == FAULTY:
        os._exit(1)
    return {"forward": _failure(lambda: layer(torch.randn(8, 16))),
            "ops": _collectives(layer, rank)}


def run_killed_in_step(rank: int) -> Dict[str, Any]:
    """An ep=2 layer (its gradients span the world and the expert-data-parallel pairs) and
    GradSync(overlap=False), whose gradient collectives all run in step(); rank FAULTY
    dies inside step(), as it issues its first gradient collective."""
    import moecomm.torch as mt
    layer = mt.MoELayer(16, 32, 8, parallel="ep=2", timeout=TIMEOUT_S)
    sync = mt.GradSync([layer], overlap=False)
    _loss(layer, rank).backward()
    if rank == FAULTY:
        sync._kernel = lambda bucket, flat: lambda op: os._exit(1)
    return {"step": _failure(sync.step), "ops": _collectives(layer, rank)}


def run_fault(case: str, outdir: str) -> List[Dict[str, Any]]:
    return run_with_deadline({"stall": run_stall, "kill": run_killed,
                              "kill-in-step": run_killed_in_step}[case], outdir)
