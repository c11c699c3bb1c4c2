"""moecomm.torch.GradSync: data-parallel gradient synchronization as the schedule's gradient
ops say, in place of DDP's buckets: each layer's dense gradients (the gate, and the model's
other parameters with the first layer) over the dense data-parallel group, its experts' over
the expert-data-parallel group, cut into the partitions the strategy's grad_sync and
grad_partitions give (Lina Sec. 4.2, FSMoE Sec. 5).

With ``overlap`` (the default), a layer's gradient ops start during the backward, as soon as
every gradient they carry has been computed (a hook on each parameter), the way DDP's buckets
do. Lina's micro-ops (the schedule's gradient ops that yield to traffic, sched/policy.h) go
through its A2A-first gate (runner.A2AFirstGate): issued in the gaps between the token path's
collectives, never beside one. The others start at once. ``step()`` finishes them and writes the synchronized
gradients; anything that did not start during the backward runs there.

With ``micro_batches=M`` a step accumulates M backwards (gradient accumulation, as DDP's
``no_sync``, DeepSpeed's ``gradient_accumulation_steps`` and Megatron's micro-batches): the
first M - 1 only add their gradients to ``.grad`` locally, the M-th's buckets start as their
gradients complete (with ``overlap``), and ``step()`` waits for them, so a step issues the
gradient collectives of one backward whatever M is. The synchronized gradients are scaled by
1/M: the mean over the step's micro-batches."""
from __future__ import annotations

from typing import Dict, Iterable, List, Optional, Sequence, Tuple

import torch

from .. import Error, _args, _moecomm
from . import collectives as col
from .fingerprint import Setting, check_agreement, text
from .layer import MoELayer
from .runner import A2AFirstGate, OpTimes, Runner, reporting

R = _moecomm.OpRole
GRAD_OPS = (R.grad_dense_allreduce, R.grad_expert_allreduce)
Bucket = Tuple[int, object]  # (layer index, gradient op role)


class GradSync:
    """Sums (or, with ``average``, averages) gradients over the data-parallel replicas.

    Args:
        layers: the model's MoELayers, input side first.
        dense: the model's parameters outside the layers (attention, embeddings, head):
            synchronized with the first layer's dense gradients.
        average: divide by the group size, as DDP does (default: sum).
        overlap: start each layer's gradient ops during the backward (one backward per
            step: call :meth:`step` between two backwards; with ``micro_batches``, during
            the step's last backward).
        micro_batches: backwards per step (gradient accumulation): exactly M backwards run
            between two :meth:`step` calls; the first M - 1 accumulate locally, the last
            one's gradients are synchronized (during it with ``overlap``), and the result is
            scaled by 1/M (with ``average``, the mean over the M micro-batches of every
            replica). None (the default): one backward per step with ``overlap``; without,
            any number, summed unscaled.

    Parameters frozen (``requires_grad=False``) when GradSync is built are skipped: they have
    no gradient to synchronize. Every rank must freeze the same ones: like the options and
    the layers, what each bucket carries is compared across ranks when GradSync is built
    (moecomm.torch.fingerprint), and a difference raises on every rank.

    Call :meth:`step` after ``loss.backward()`` (the M-th, with ``micro_batches``) and before
    the optimizer's step. A step() before the M-th backward, or an (M + 1)-th backward before
    step(), raises moecomm.Error naming the counts. With ``overlap``, a step's gradients are
    its backwards' only: what ``.grad`` held before the step's first backward is replaced
    (as step() replaces it); without, ``.grad`` is synchronized as it stands. A gradient
    collective that fails (a peer stalled past the layers' timeout, or died) raises
    moecomm.Error naming its op (runner.collective_error), from the backward's hooks or
    from step().
    """

    def __init__(self, layers: Sequence[MoELayer], dense: Iterable[torch.nn.Parameter] = (),
                 average: bool = False, overlap: bool = True,
                 micro_batches: Optional[int] = None) -> None:
        if not layers:
            raise Error("GradSync: give at least one MoELayer")
        if micro_batches is not None and _args.integer("GradSync: micro_batches",
                                                       micro_batches) < 1:
            raise Error(f"GradSync: micro_batches must be a positive integer, got "
                        f"{micro_batches!r}")
        self.layers = list(layers)
        self.average = average
        self.micro_batches = micro_batches
        # Backwards a step takes (None: any number, overlap=False without micro_batches).
        self._limit = micro_batches or (1 if overlap else None)
        self.extra = [p for p in dense if p.requires_grad]
        self.last_times: Dict[int, OpTimes] = self._times()
        # Frozen parameters (requires_grad=False when GradSync is built) have no gradient to
        # synchronize: they are left out of their bucket, on every rank alike as long as
        # every rank freezes the same ones. A bucket left empty runs no ops (nor does a step
        # with no bucket).
        self._synced: Dict[Bucket, List[torch.nn.Parameter]] = {}
        for i in reversed(range(len(self.layers))):
            for n in GRAD_OPS:
                params = [p for p in self._layer_params(i, n) if p.requires_grad]
                if self._ops(i, n) and params:
                    self._synced[(i, n)] = params
        self._buckets: List[Bucket] = list(self._synced)
        # With micro_batches, the parameters no gradient op carries (experts no other rank
        # replicates) are counted and scaled by 1/M as well: every gradient is the step's mean.
        self._local: List[torch.nn.Parameter] = []
        if micro_batches is not None:
            synced = {id(p) for ps in self._synced.values() for p in ps}
            for i in range(len(self.layers)):
                for n in GRAD_OPS:
                    for p in self._layer_params(i, n):
                        if p.requires_grad and id(p) not in synced:
                            synced.add(id(p))
                            self._local.append(p)
        # Every rank's settings and buckets agree before the first gradient's collective.
        check_agreement("GradSync", self._settings(overlap))
        micro = any(o.yields_to_traffic for i, n in self._buckets for o in self._ops(i, n))
        self.gate = A2AFirstGate() if micro and overlap else None
        for layer in self.layers:
            layer.network_gate = self.gate
        # By id(param): the step's gradient, once its last backward has delivered it.
        self._fresh: Dict[int, torch.Tensor] = {}
        # By id(param): the gradients it received this step; the most is the step's backwards.
        self._seen: Dict[int, int] = {}
        self._backwards = 0
        self._stepped = True  # the last step() ran: the next gradient starts a new step
        # A gradient arrived since the last step() (built after a backward: the gradients
        # already there are the first step's).
        self._backward = any(p.grad is not None for p in self._every())
        self._started: Dict[Bucket, Tuple[torch.Tensor, List]] = {}
        self._hooks = []
        for bucket in self._buckets:
            for p in self._params(*bucket):
                self._hooks.append(p.register_hook(
                    lambda g, p=p, bucket=bucket: self._on_grad(bucket, p, g, overlap)))
        for p in self._local:
            self._hooks.append(p.register_hook(lambda g, p=p: self._on_grad(None, p, g, overlap)))

    def _every(self) -> List[torch.nn.Parameter]:
        return [p for ps in self._synced.values() for p in ps] + self._local

    def _settings(self, overlap: bool) -> List[Setting]:
        """What every rank must agree on: the options, the layers, and what each bucket
        synchronizes (a parameter frozen on one rank only changes its bucket)."""
        def size(params: Sequence[torch.nn.Parameter]) -> str:
            return f"{len(params)} tensors, {sum(p.numel() for p in params)} values"

        out = [("average", text(self.average)), ("overlap", text(overlap)),
               ("micro_batches", text(self.micro_batches)),
               ("layers", text(len(self.layers))), ("dense", size(self.extra))]
        for i, layer in enumerate(self.layers):
            out.append((f"layer {i}: strategy", layer.strategy))
            for role, what in zip(GRAD_OPS, ("dense", "expert")):
                out.append((f"layer {i}: {what} gradients", size(self._synced.get((i, role),
                                                                                    []))))
        return out

    def _ops(self, index: int, role: object) -> List:
        layer = self.layers[index]
        return [o for o in layer.schedule.ops(layer.rank) if o.role == role]

    def _layer_params(self, index: int, role: object) -> List[torch.nn.Parameter]:
        layer = self.layers[index]
        if role == R.grad_expert_allreduce:
            return layer.expert_params()
        return layer.dense_params() + (self.extra if index == 0 else [])

    def _params(self, index: int, role: object) -> List[torch.nn.Parameter]:
        return self._synced[(index, role)]

    # --- during the backward
    def _on_grad(self, bucket: Optional[Bucket], p: torch.nn.Parameter, grad: torch.Tensor,
                 overlap: bool) -> None:
        n = self._seen.get(id(p), 0) + 1
        if self._limit is not None and n > self._limit:
            raise Error(self._extra_backward(n, overlap))
        self._seen[id(p)] = n
        self._backwards = max(self._backwards, n)
        self._backward = True
        if not overlap:
            return
        if self._stepped:
            self._new_times()
        last = self.micro_batches or 1
        if n < last or bucket is None:
            # An accumulating backward (or a parameter no op carries): autograd adds the
            # gradient to .grad, and no collective runs. The step's first drops what .grad
            # held, as step() replaces it.
            if n == 1 and last > 1:
                p.grad = None
            return
        self._fresh[id(p)] = grad if n == 1 or p.grad is None else p.grad + grad
        params = self._params(*bucket)
        if bucket not in self._started and all(id(q) in self._fresh for q in params):
            flat = torch.cat([self._fresh[id(q)].reshape(-1) for q in params])
            self._start(bucket, flat)

    def _extra_backward(self, n: int, overlap: bool) -> str:
        if self.micro_batches is None:
            return ("GradSync(overlap=True): a second backward before step(); call step() "
                    "after each backward, or give micro_batches=M to accumulate M backwards "
                    "per step (or use overlap=False)")
        m = self.micro_batches
        return (f"GradSync(micro_batches={m}): backward {n} before step(); a step takes "
                f"exactly {m} backward{'s' if m > 1 else ''}: call step() after backward "
                f"{m}")

    def _start(self, bucket: Bucket, flat: torch.Tensor) -> None:
        started: List = []
        self._started[bucket] = (flat, started)
        for op in self._ops(*bucket):
            def issue(op=op):
                start = self.last_times[bucket[0]].now()
                with reporting(op):
                    pending = self._kernel(bucket, flat)(op)
                started.append((op, pending, start))
                return lambda: self._finish(bucket[0], op, pending, start)
            if self.gate is not None and op.yields_to_traffic:
                self.gate.submit(issue)
            else:
                issue()

    def _finish(self, index: int, op: object, pending: col.Pending, start: object) -> None:
        if op.id not in self.last_times[index]:
            with reporting(op):
                pending.wait()
            self.last_times[index].record(op.id, start, self.last_times[index].now())

    # --- after it
    def step(self) -> None:
        """Finishes the started gradient ops, runs the others (output side first), and sets
        every synchronized parameter's ``.grad``. One step() per backward (per
        ``micro_batches`` backwards, or, with ``overlap=False``, per accumulated backwards):
        a second would sum the sums again."""
        if (self._buckets or self._local) and not self._backward:
            raise Error("GradSync.step(): no backward since the last step() (nor a gradient "
                        "when GradSync was built); call step() once after each "
                        "loss.backward(): a second step() would synchronize the synchronized "
                        "gradients again")
        m = self.micro_batches
        if (self._buckets or self._local) and m is not None and self._backwards < m:
            left = m - self._backwards
            whose = "micro-batches'" if left > 1 else "micro-batch's"
            raise Error(f"GradSync.step(): {self._backwards} of the step's {m} backwards "
                        f"(micro_batches={m}) ran since the last step(); run the other "
                        f"{left} {whose} forward and backward first")
        if self._stepped:
            self._new_times()
        if self.gate is not None:
            self.gate.drain()
        for bucket in self._buckets:
            if bucket in self._started:
                flat, started = self._started[bucket]
                for op, pending, start in started:
                    self._finish(bucket[0], op, pending, start)
            else:
                flat = self._flatten(*bucket)
                kernels = {bucket[1]: self._kernel(bucket, flat)}
                Runner(kernels, self.last_times[bucket[0]]).run(self._ops(*bucket))
            self._unflatten(bucket, flat)
        if m is not None and m > 1:
            for p in self._local:
                if p.grad is not None:
                    p.grad.div_(m)
        self._fresh.clear()
        self._seen.clear()
        self._backwards = 0
        self._started.clear()
        self._stepped = True
        self._backward = False

    def _new_times(self) -> None:
        self.last_times = self._times()
        self._stepped = False

    def _times(self) -> Dict[int, OpTimes]:
        """Each layer's gradient ops' times, on the device of its parameters."""
        return {i: OpTimes(layer.expert_params()[0].device)
                for i, layer in enumerate(self.layers)}

    def _flatten(self, index: int, role: object) -> torch.Tensor:
        # A bucket holds at least one parameter (empty ones are left out when GradSync is
        # built), so the flat gradient is on the parameters' device, as NCCL needs.
        grads = [p.grad if p.grad is not None else torch.zeros_like(p)
                 for p in self._params(index, role)]
        return torch.cat([g.reshape(-1) for g in grads])

    def _unflatten(self, bucket: Bucket, flat: torch.Tensor) -> None:
        at = 0
        for p in self._params(*bucket):
            n = p.numel()
            p.grad = flat[at:at + n].view_as(p).clone()
            at += n

    def _kernel(self, bucket: Bucket, flat: torch.Tensor):
        layer = self.layers[bucket[0]]
        parts = len(self._ops(*bucket))
        accumulated = self.micro_batches or 1

        def run(op: object) -> col.Pending:
            coll = layer.schedule.collective(op.collective)
            p = max(op.chunk, 0)
            piece = flat[flat.numel() * p // parts:flat.numel() * (p + 1) // parts]
            pending = col.all_reduce(piece, layer.groups.get(coll.group))
            # The sum over replicas (and micro-batches) made a mean in one division.
            divisor = accumulated * (len(coll.group) if self.average else 1)
            if divisor == 1:
                return pending
            return col.Pending(pending, lambda: piece.div_(divisor))
        return run
