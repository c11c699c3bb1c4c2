"""Runs a rank's ops of a schedule in op order (moecomm's DESIGN.md "One schedule, three
executors"): compute and copy ops call their kernel; a collective's kernel issues it and
returns a :class:`~moecomm.torch.collectives.Pending`, which is finished (its received data
unpacked) when an op that depends on it starts, or the next op of its stream does (a stream
runs its ops in order, as a CUDA stream would). Ops on other streams therefore overlap it:
the experts of chunk i run while chunk i+1's A2A is in flight. Every op's start and end wall
time is recorded so the run can be set beside the simulator's, op by op."""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Dict, Iterable, List, Optional, Tuple

from .. import Error
from .collectives import Pending


@dataclass
class OpTimes:
    """Wall times of the ops run, seconds since ``origin`` (time.perf_counter())."""
    origin: float = field(default_factory=time.perf_counter)
    spans: Dict[int, Tuple[float, float]] = field(default_factory=dict)

    def now(self) -> float:
        """A time stamp for :meth:`record`."""
        return time.perf_counter()

    def record(self, op_id: int, start: float, end: float) -> None:
        self.spans[op_id] = (start - self.origin, end - self.origin)


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
    ``gate`` when the schedule has gradient micro-ops (GradSync sets it)."""

    def __init__(self, kernels: Dict[object, Kernel], times: OpTimes,
                 gate: Optional[A2AFirstGate] = None) -> None:
        self.kernels = kernels
        self.times = times
        self.gate = gate
        self._inflight: Dict[int, Tuple[object, Pending, float]] = {}

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
            pending = kernel(op)
            if pending is None:
                self.times.record(op.id, start, self.times.now())
            else:
                self._inflight[op.id] = (op, pending, start)
        self.finish_all()

    def finish(self, op_id: int) -> None:
        op, pending, start = self._inflight.pop(op_id)
        pending.wait()
        self.times.record(op_id, start, self.times.now())
        if self.gate is not None and op.waits_for_micro_ops and not any(
                o.waits_for_micro_ops for o, _, _ in self._inflight.values()):
            self.gate.gap()

    def finish_all(self) -> None:
        for op_id in sorted(self._inflight):
            if op_id in self._inflight:
                self.finish(op_id)
