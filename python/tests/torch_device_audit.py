"""Device neutrality of moecomm.torch.SampleMovingMoE and GradSync, checked on CPU: the layers
run on 4 gloo processes under an audit that plays the part of a second device.

The input, targets and the layers' parameters are marked "device"; the audit (a
torch.overrides.TorchFunctionMode, plus Tensor.__getitem__, which the mode does not see in
torch 1.13) carries a mark on every tensor the code makes:

- a factory (torch.zeros, arange, tensor, as_tensor, from_numpy, ...) without ``device=``
  makes a "host" tensor, one with ``device=`` a "device" tensor;
- ``.to(device)`` (or ``.cuda()``) makes a "device" tensor, ``.cpu()`` a "host" one, each a
  new tensor as across real devices;
- every other op's result is "device" if any input is, else "host" if any input is; tensors
  the audit never saw (the autograd engine's gradients) are the device's.

A call that mixes a "device" tensor with a "host" one of one or more dimensions (CUDA takes
CPU scalars only), ``.numpy()`` of a "device" tensor, and a "host" tensor handed to a
torch.distributed collective (NCCL takes device tensors only) are each recorded as a
violation, with the moecomm line that made it. Reads of a "device" tensor on the host
(``.tolist()``, ``.item()``, ``.cpu()``, ``nonzero``, ``bincount``, ...: host syncs on a GPU)
and blocking copies onto the device are recorded per function, so the tests can hold their
number down."""
from __future__ import annotations

import os
import sys
from typing import Any, Dict, List, Optional

import torch
import torch.distributed as dist
from torch.overrides import TorchFunctionMode

from torch_spawn import guarded, run_on_ranks

HOST, DEVICE = "host", "device"
MARK = "_moecomm_audit_device"

FACTORIES = {torch.zeros, torch.ones, torch.empty, torch.full, torch.arange, torch.tensor,
             torch.as_tensor, torch.from_numpy, torch.rand, torch.randn, torch.randint,
             torch.eye, torch.linspace, torch.randperm, torch.empty_strided,
             torch.scalar_tensor}
TO_DEVICE = {torch.Tensor.to, torch.Tensor.cuda}
TO_HOST = {torch.Tensor.cpu}
# Reads that wait for the device (their result's size or value is needed on the host).
SYNCS = {torch.Tensor.tolist: "tolist", torch.Tensor.item: "item", torch.Tensor.cpu: "cpu",
         torch.Tensor.__bool__: "bool", torch.Tensor.__int__: "int",
         torch.Tensor.__float__: "float", torch.Tensor.__index__: "index",
         torch.nonzero: "nonzero", torch.Tensor.nonzero: "nonzero",
         torch.bincount: "bincount", torch.Tensor.bincount: "bincount",
         torch.unique: "unique", torch.masked_select: "masked_select",
         torch.repeat_interleave: "repeat_interleave",
         torch.Tensor.repeat_interleave: "repeat_interleave"}
COLLECTIVES = ("all_gather", "all_to_all_single", "all_reduce", "reduce_scatter", "broadcast",
               "all_to_all", "_all_gather_base", "_reduce_scatter_base")
# The files audited: a line of theirs is where a violation is reported.
AUDITED = ("netmoe.py", "grad_sync.py", "collectives.py", "routing.py", "experts.py",
           "fingerprint.py", "runner.py", "layer.py", "token_path.py", "exchange_plan.py",
           "expert_compute.py", "hybrid.py")


def mark(t: torch.Tensor, where: str) -> torch.Tensor:
    setattr(t, MARK, where)
    return t


def mark_of(t: torch.Tensor) -> str:
    return getattr(t, MARK, DEVICE)


def tensors(obj: Any) -> List[torch.Tensor]:
    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, (list, tuple)):
        return [t for o in obj for t in tensors(o)]
    if isinstance(obj, dict):
        return [t for o in obj.values() for t in tensors(o)]
    return []


def caller() -> str:
    """The innermost moecomm.torch line on the stack: file:function:line."""
    frame = sys._getframe(2)
    while frame is not None:
        name = frame.f_code.co_filename
        if os.sep + "moecomm" + os.sep in name and name.endswith(AUDITED):
            return f"{os.path.basename(name)}:{frame.f_code.co_name}:{frame.f_lineno}"
        frame = frame.f_back
    return "outside moecomm"


class DeviceAudit(TorchFunctionMode):
    def __init__(self) -> None:
        super().__init__()
        self.violations: List[str] = []
        self.syncs: Dict[str, int] = {}  # "file:function what" -> count
        self.calls = 0  # ops seen in the audited files
        self.collectives = 0  # collectives whose tensors were checked

    # --- the marks
    def _mixed(self, name: str, inputs: List[torch.Tensor]) -> None:
        marks = [mark_of(t) for t in inputs]
        if DEVICE in marks and any(m == HOST and t.dim() > 0 for m, t in zip(marks, inputs)):
            shapes = ", ".join(f"{m} {tuple(t.shape)}" for m, t in zip(marks, inputs))
            self.violations.append(f"{caller()}: {name} mixes device and host tensors ({shapes})")

    def _sync(self, what: str, inputs: List[torch.Tensor], always: bool = False) -> None:
        if always or any(mark_of(t) == DEVICE for t in inputs):
            where = caller().rsplit(":", 1)[0]
            key = f"{where} {what}"
            self.syncs[key] = self.syncs.get(key, 0) + 1

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", str(func))
        inputs = tensors(args) + tensors(kwargs)
        if caller() != "outside moecomm":
            self.calls += 1
        if func in SYNCS and not (SYNCS[func] == "repeat_interleave" and (
                "output_size" in kwargs or not isinstance(args[1] if len(args) > 1 else
                                                          kwargs.get("repeats"), torch.Tensor))):
            self._sync(SYNCS[func], inputs)  # (repeats given as a number: no read back)
        if func in TO_DEVICE and mark_of(args[0]) == HOST and not kwargs.get("non_blocking") \
                and self._where(func, args, kwargs, inputs) == DEVICE:
            # A blocking copy from pageable host memory waits for the device's stream.
            self._sync("blocking copy to the device", inputs, always=True)
        if func is torch.Tensor.numpy and mark_of(args[0]) == DEVICE:
            self.violations.append(f"{caller()}: numpy() of a device tensor")
        # Copies cross devices: .to, .cpu, copy_, and t[a:b] = u (a copy_ into a view).
        moves = func in TO_DEVICE or func in TO_HOST or func is torch.Tensor.copy_ or (
            func is torch.Tensor.__setitem__ and not tensors(args[1]))
        if not moves and func not in FACTORIES:
            self._mixed(name, inputs)
        out = func(*args, **kwargs)
        where = self._where(func, args, kwargs, inputs)
        if isinstance(out, torch.Tensor) and any(out is t for t in inputs) and \
                mark_of(out) != where and (moves or func is torch.as_tensor):
            out = out.clone()  # across real devices the copy is a new tensor
        for t in tensors(out):
            mark(t, where)
        return out

    @staticmethod
    def _where(func, args, kwargs, inputs) -> str:
        """The mark of a call's result."""
        given = kwargs.get("device") is not None or any(
            isinstance(a, (torch.device, str)) for a in args[1:])
        if func in TO_HOST:
            return HOST
        if func is torch.Tensor.cuda or (func in TO_DEVICE and given):
            return DEVICE
        if func in TO_DEVICE and len(args) > 1 and isinstance(args[1], torch.Tensor):
            return mark_of(args[1])  # .to(other): other's device
        if kwargs.get("device") is not None:
            return DEVICE
        if func in FACTORIES and not inputs:
            return HOST
        marks = {mark_of(t) for t in inputs}
        return DEVICE if DEVICE in marks or not marks else HOST

    # --- what the mode does not see
    def getitem(self, original):
        audit = self

        def __getitem__(t: torch.Tensor, key: Any) -> Any:
            index = tensors(key)
            audit._mixed("__getitem__", [t] + index)
            if any(i.dtype == torch.bool for i in index):
                audit._sync("mask", [t] + index)
            out = original(t, key)
            marks = {mark_of(x) for x in [t] + index}
            for o in tensors(out):
                mark(o, DEVICE if DEVICE in marks else HOST)
            return out
        return __getitem__

    def collective(self, name: str, original):
        audit = self

        def run(*args: Any, **kwargs: Any) -> Any:
            audit.collectives += 1
            for t in tensors(args) + tensors(kwargs):
                if mark_of(t) != DEVICE:
                    audit.violations.append(f"{caller()}: host tensor {tuple(t.shape)} given "
                                            f"to torch.distributed.{name}")
            return original(*args, **kwargs)
        return run

    def inside(self, fn):
        """fn run under the mode: the autograd engine runs backward code outside it."""
        audit = self

        def run(*args: Any, **kwargs: Any) -> Any:
            TorchFunctionMode.__enter__(audit)
            try:
                return fn(*args, **kwargs)
            finally:
                TorchFunctionMode.__exit__(audit, None, None, None)
        return run

    def __enter__(self):
        from moecomm.torch import grad_sync, layer, netmoe
        self._saved = [(torch.Tensor, "__getitem__", torch.Tensor.__getitem__),
                       (netmoe._SampleExchange, "backward",
                        netmoe._SampleExchange.__dict__["backward"]),
                       (layer._Exchange, "backward", layer._Exchange.__dict__["backward"]),
                       (grad_sync.GradSync, "_on_grad", grad_sync.GradSync._on_grad)]
        torch.Tensor.__getitem__ = self.getitem(torch.Tensor.__getitem__)
        # torch.from_numpy is not seen by the mode: its tensors are the host's.
        self._saved.append((torch, "from_numpy", torch.from_numpy))
        torch.from_numpy = lambda a, _real=torch.from_numpy: mark(_real(a), HOST)
        # The layers' backward and GradSync's gradient hooks, which the engine calls.
        for exchange in (netmoe._SampleExchange, layer._Exchange):
            exchange.backward = staticmethod(
                self.inside(exchange.__dict__["backward"].__func__))
        grad_sync.GradSync._on_grad = self.inside(grad_sync.GradSync._on_grad)
        for name in COLLECTIVES:
            if hasattr(dist, name):
                self._saved.append((dist, name, getattr(dist, name)))
                setattr(dist, name, self.collective(name, getattr(dist, name)))
        return super().__enter__()

    def __exit__(self, *exc):
        for owner, name, original in reversed(self._saved):
            setattr(owner, name, original)
        return super().__exit__(*exc)


def mark_device(*ts: torch.Tensor) -> None:
    """What a model moved to the device holds: the input, targets and parameters."""
    for t in ts:
        mark(t, DEVICE)


# (id, strategy, parallel, gate, ffn_type, blocks, targets, average, overlap): the paths the
# layer and GradSync take (chunks, moved sample ids and targets, a routed A2A, EDP replicas).
CASES = [
    ("two-blocks-targets", "base=netmoe,chunks_fwd=2,chunks_bwd=3", "ep=4", "gshard", "gelu", 2,
     True, False, True),
    ("2dh-xmoe-swiglu", "base=netmoe,a2a=2dh,chunks=2", "ep=4", "xmoe", "swiglu", 1, False, True,
     True),
    ("edp-no-overlap", "base=netmoe,chunks=2", "ep=2", "gshard", "gelu", 1, False, True, False),
]


def run_step(case, rank: int, audit: Optional[DeviceAudit]) -> List[torch.Tensor]:
    """One forward, backward and GradSync.step; the output, the input's gradient and every
    parameter's (after the step)."""
    import contextlib
    import moecomm.torch as mt
    from torch_netmoe_cases import HIDDEN, FFN, EXPERTS, SAMPLES, SEQ, VOCAB, TWO_NODES
    name, strategy, parallel, gate, ffn, blocks, with_targets, average, overlap = case
    layers = [mt.SampleMovingMoE(HIDDEN, FFN, EXPERTS, 2, gate=gate, ffn_type=ffn,
                                 strategy=strategy, parallel=parallel, cluster=TWO_NODES,
                                 samples=SAMPLES, seq_len=SEQ, seed=3 + i,
                                 vocab_size=VOCAB if with_targets and i == blocks - 1 else None)
              for i in range(blocks)]
    gen = torch.Generator().manual_seed(11 + rank)
    h = torch.randn(SAMPLES, SEQ, HIDDEN, generator=gen).requires_grad_()
    targets = torch.randint(0, VOCAB, (SAMPLES, SEQ), generator=gen)
    r = torch.randn(SAMPLES, SEQ, HIDDEN, generator=gen)
    params = [p for layer in layers for p in layer.parameters()]
    mark_device(h, targets, r, *params)
    with audit if audit is not None else contextlib.nullcontext():
        sync = mt.GradSync(layers, average=average, overlap=overlap)
        y, ids = h, None
        for layer in layers:
            out = layer(y, ids, targets if layer.moves_targets else None)
            y, ids = out.y, out.sample_ids
        (y * r).sum().backward()
        sync.step()
    return [y.detach(), ids, h.grad] + [p.grad for p in params]


# MoELayer: (id, strategy, parallel, gate, capacity_factor, ffn_type, two nodes): the token
# path's chunks (cut otherwise in the backward), a routed A2A, MoNTA's TP parts and ESP
# collectives, capacity drops, recomputation and HybridEP's expert transfer.
LAYER_CASES = [
    ("layer-fsmoe-r3-r2", "base=fsmoe,chunks_fwd=3,chunks_bwd=2", "ep=4", "gshard", None,
     "gelu", False),
    ("layer-2dh-capacity", "base=fsmoe,a2a=2dh,chunks=2", "ep=4", "xmoe", 1.0, "swiglu", True),
    ("layer-monta-o3", "monta-o3", "tp=2,ep=2,esp=2", "gshard", None, "gelu", True),
    ("layer-recompute-edp", "base=lina,recompute_experts=true,grad_partitions=2", "ep=2",
     "sigmoid", None, "gelu", False),
    ("layer-hybridep-sr", "base=hybridep,hybrid_domain=2,compression=0.5", "ep=4", "gshard",
     None, "gelu", False),
]


def run_layer_step(case, rank: int, audit: Optional[DeviceAudit]) -> List[torch.Tensor]:
    """Two MoELayers chained, one forward, backward and GradSync.step."""
    import contextlib
    import moecomm.torch as mt
    from torch_cases import HIDDEN, FFN, EXPERTS, TOKENS, TWO_NODES
    name, strategy, parallel, gate, capacity, ffn, two_nodes = case
    layers = [mt.MoELayer(HIDDEN, FFN, EXPERTS, 2, gate=gate, capacity_factor=capacity,
                          ffn_type=ffn, strategy=strategy, parallel=parallel,
                          cluster=TWO_NODES if two_nodes else None, tokens=TOKENS, seed=5 + i)
              for i in range(2)]
    # TP members pass the same tokens.
    gen = torch.Generator().manual_seed(21 + (rank // 2 if "tp=2" in parallel else rank))
    x = torch.randn(TOKENS, HIDDEN, generator=gen).requires_grad_()
    r = torch.randn(TOKENS, HIDDEN, generator=gen)
    params = [p for layer in layers for p in layer.parameters()]
    mark_device(x, r, *params)
    with audit if audit is not None else contextlib.nullcontext():
        sync = mt.GradSync(layers, average=True)
        y = x
        for layer in layers:
            y = layer(y)
        (y * r).sum().backward()
        sync.step()
    return [y.detach(), x.grad] + [p.grad for p in params]


def run_case(case, rank: int) -> dict:
    step = run_layer_step if case in LAYER_CASES else run_step
    plain = step(case, rank, None)
    audit = DeviceAudit()
    audited = step(case, rank, audit)
    return {"violations": audit.violations, "syncs": audit.syncs, "calls": audit.calls,
            "collectives": audit.collectives,
            "same": all(torch.equal(a, b) for a, b in zip(plain, audited))}


def control(rank: int) -> dict:
    """The audit catches the bug class here: a host index into a device tensor, a host
    tensor given to a collective, numpy() of a device tensor."""
    audit = DeviceAudit()
    x = mark(torch.zeros(4), DEVICE)
    with audit:
        x[torch.arange(2)]
        dist.all_reduce(torch.zeros(1))
        x.numpy()
    return {"violations": audit.violations}


def run_rank(rank: int, names) -> dict:
    return {"control": guarded(control, rank),
            "cases": {c[0]: guarded(run_case, c, rank) for c in CASES + LAYER_CASES
                      if not names or c[0] in names}}


def run_all(outdir: str, names=()):
    return run_on_ranks(run_rank, outdir, list(names))


if __name__ == "__main__":
    import json
    import tempfile
    for r, res in enumerate(run_all(tempfile.mkdtemp(), sys.argv[1:])):
        print(r, json.dumps(res, indent=1))
