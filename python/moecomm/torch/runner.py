"""Runs a rank's ops of a schedule in op order (moecomm's DESIGN.md "One schedule, three
executors"): compute and copy ops call their kernel; a collective's kernel issues it and
returns a :class:`~moecomm.torch.collectives.Pending`, which is finished (its received data
unpacked) when an op that depends on it starts, or the next op of its stream does (a stream
runs its ops in order, as a CUDA stream would). Ops on other streams therefore overlap it:
the experts of chunk i run while chunk i+1's A2A is in flight. Every op's start and end time
is recorded (OpTimes: the host's clock on CPU, CUDA events on GPUs) so the run can be set
beside the simulator's, op by op."""
from __future__ import annotations

import contextlib
import datetime
import time
from typing import Callable, Dict, Iterable, Iterator, List, Optional, Tuple, Union

import torch
import torch.distributed as dist

from .. import Error
from .collectives import FAILED_GROUP, Pending
from .groups import group_timeout

Device = Union[torch.device, str, None]


def cuda_event(device: torch.device) -> Callable[[], object]:
    """A stamp maker for :class:`OpTimes` on ``device``: a timing CUDA event recorded on the
    device's current stream (the work issued so far on it precedes the stamp; no host
    synchronization)."""
    def stamp() -> object:
        event = torch.cuda.Event(enable_timing=True)
        event.record(torch.cuda.current_stream(device))
        return event
    return stamp


class OpTimes:
    """Times of the ops run: ``spans`` maps an op's id to its (start, end), seconds since
    ``origin``, the stamp taken when this was made.

    On CPU (the default) a stamp is ``time.perf_counter()``. On a CUDA ``device`` it is a
    CUDA event recorded on the device's current stream (``event``, a stamp maker, replaces
    :func:`cuda_event`): kernels run asynchronously, so the host's clock would time their
    launch, not their work. Recording an event does not wait for the device; the events are
    turned into seconds (``origin.elapsed_time``, after waiting for each) only when ``spans``
    is read, so a step that records times never synchronizes with the device for them."""

    def __init__(self, device: Device = None,
                 event: Optional[Callable[[], object]] = None) -> None:
        self.device = torch.device(device) if device is not None else torch.device("cpu")
        if self.device.type == "cuda" or event is not None:
            self._stamp = event if event is not None else cuda_event(self.device)
            self._events = True
        else:
            self._stamp = time.perf_counter
            self._events = False
        self.origin = self._stamp()
        self._origin_done = False
        self._marks: Dict[int, Tuple[object, object]] = {}  # recorded, not yet resolved
        self._spans: Dict[int, Tuple[float, float]] = {}

    def now(self) -> object:
        """A time stamp for :meth:`record`."""
        return self._stamp()

    def record(self, op_id: int, start: object, end: object) -> None:
        self._spans.pop(op_id, None)
        self._marks[op_id] = (start, end)

    def __contains__(self, op_id: int) -> bool:
        """Whether ``op_id`` was recorded (without resolving any stamp)."""
        return op_id in self._marks or op_id in self._spans

    @property
    def spans(self) -> Dict[int, Tuple[float, float]]:
        """{op id: (start, end)} in seconds since ``origin``, in the order recorded. CUDA
        events are waited for here, once each."""
        for op_id, (start, end) in self._marks.items():
            self._spans[op_id] = (self._seconds(start), self._seconds(end))
        self._marks.clear()
        return dict(self._spans)

    def _seconds(self, stamp: object) -> float:
        if not self._events:
            return stamp - self.origin
        if not self._origin_done:  # elapsed_time needs both events complete
            self.origin.synchronize()
            self._origin_done = True
        stamp.synchronize()
        return self.origin.elapsed_time(stamp) / 1e3  # milliseconds


_TAGGED = object()  # reporting(): only the failures the collectives module tagged


def _seconds(timeout: Optional[datetime.timedelta]) -> str:
    return "unknown" if timeout is None else f"{timeout.total_seconds():g} s"


def op_label(op: object) -> str:
    """A schedule op as errors name it: ``moe.combine.a2a [layer 1, backward]``."""
    return f"{op.name} [layer {op.layer}, {op.phase}]"


def collective_error(op: object, error: RuntimeError,
                     group: Optional[dist.ProcessGroup]) -> Error:
    """A collective of ``op`` (a ScheduleOp) failed on ``group`` (None: the default group)
    with the backend's ``error``: what a user can act on, naming the op, this rank, the
    group's world ranks, the timeout it runs under and the backend's message."""
    try:
        ranks = list(range(dist.get_world_size())) if group is None else \
            [int(r) for r in dist.get_process_group_ranks(group)]
        backend = str(dist.get_backend(group))
    except RuntimeError:  # the group was torn down meanwhile
        ranks, backend = "unknown", "backend"
    return Error(f"{op_label(op)}: collective failed on rank {op.rank} with world ranks "
                 f"{ranks} (timeout {_seconds(group_timeout(group))}): a peer stalled past "
                 f"the timeout or died. {backend}: {error}")


@contextlib.contextmanager
def reporting(op: object, group: object = _TAGGED) -> Iterator[None]:
    """Turns a collective's failure inside the block into :func:`collective_error` for
    ``op``, chained to the backend's exception: a failure the collectives module tagged
    (its FAILED_GROUP), or, with ``group`` (a process group, None: the default one), any
    RuntimeError, for a block that runs only ``group``'s collective. Other errors pass."""
    try:
        yield
    except RuntimeError as e:
        failed = getattr(e, FAILED_GROUP, group)
        if failed is _TAGGED:
            raise
        raise collective_error(op, e, failed) from e


Kernel = Callable[[object], Optional[Pending]]


class A2AFirstGate:
    """Lina's A2A-first rule (lina.txt Sec. 4.1; sched/policy.h, bound as
    ``ScheduleOp.yields_to_traffic`` and ``waits_for_micro_ops``: a gradient micro-op, a
    collective of priority < 0, never shares the network with a collective of priority >= 0,
    the A2As and the rest of the token path): micro-ops wait in a queue as their gradients
    become ready; one is issued in each gap the token path leaves (such a collective just
    finished and none in flight), and such a collective is issued only after the micro-ops in
    flight have finished (strict priority without preemption). The gaps fall at the same
    point of every rank's op sequence, so every member of a micro-op's group issues it at the
    same place in its order of collectives, and they cannot wait on each other in a cycle."""

    def __init__(self) -> None:
        self._queue: List[Callable[[], None]] = []
        self._inflight: List[Callable[[], None]] = []

    def submit(self, issue: Callable[[], Callable[[], None]]) -> None:
        """``issue()`` starts the micro-op and returns what finishes it."""
        self._queue.append(issue)

    def before_traffic(self) -> None:
        for finish in self._inflight:
            finish()
        self._inflight.clear()

    def gap(self) -> None:
        if self._queue:
            self._inflight.append(self._queue.pop(0)())

    def drain(self) -> None:
        """After the backward: every micro-op issued and finished."""
        while self._queue:
            self._inflight.append(self._queue.pop(0)())
        self.before_traffic()


class Runner:
    """Runs ops with the kernels registered by role (``_moecomm.OpRole``), under Lina's
    ``gate`` when the schedule has gradient micro-ops (GradSync sets it). A collective that
    fails, issued or waited for (a peer stalled past the groups' timeout, or died), raises
    moecomm.Error naming its op (:func:`collective_error`)."""

    reporting = staticmethod(reporting)  # for a collective run outside the ops' kernels

    def __init__(self, kernels: Dict[object, Kernel], times: OpTimes,
                 gate: Optional[A2AFirstGate] = None) -> None:
        self.kernels = kernels
        self.times = times
        self.gate = gate
        self._inflight: Dict[int, Tuple[object, Pending, object]] = {}

    def run(self, ops: Iterable[object]) -> None:
        """Runs ``ops`` (ScheduleOps of one rank, in op order). Dependencies on ops outside
        the list (the model's own: attention, the LM head) are taken as met."""
        for op in sorted(ops, key=lambda o: o.id):
            kernel = self.kernels.get(op.role)
            if kernel is None:
                raise Error(f"torch executor: op {op.id} (rank {op.rank}, '{op.name}', "
                            f"{op.phase}) has no kernel")
            for dep in [op.prev, *op.deps]:
                if dep in self._inflight:
                    self.finish(dep)
            if self.gate is not None and op.waits_for_micro_ops:
                self.gate.before_traffic()
            start = self.times.now()
            with reporting(op):
                pending = kernel(op)
            if pending is None:
                self.times.record(op.id, start, self.times.now())
            else:
                self._inflight[op.id] = (op, pending, start)
        self.finish_all()

    def finish(self, op_id: int) -> None:
        op, pending, start = self._inflight.pop(op_id)
        with reporting(op):
            pending.wait()
        self.times.record(op_id, start, self.times.now())
        if self.gate is not None and op.waits_for_micro_ops and not any(
                o.waits_for_micro_ops for o, _, _ in self._inflight.values()):
            self.gate.gap()

    def finish_all(self) -> None:
        for op_id in sorted(self._inflight):
            if op_id in self._inflight:
                self.finish(op_id)
