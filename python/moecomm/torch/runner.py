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
from typing import Callable, Dict, Iterable, Optional, Tuple

from .. import Error
from .collectives import Pending


@dataclass
class OpTimes:
    """Wall times of the ops run, seconds since ``origin`` (time.perf_counter())."""
    origin: float = field(default_factory=time.perf_counter)
    spans: Dict[int, Tuple[float, float]] = field(default_factory=dict)

    def record(self, op_id: int, start: float, end: float) -> None:
        self.spans[op_id] = (start - self.origin, end - self.origin)


Kernel = Callable[[object], Optional[Pending]]


class Runner:
    """Runs ops with the kernels registered by label name."""

    def __init__(self, kernels: Dict[str, Kernel], times: OpTimes) -> None:
        self.kernels = kernels
        self.times = times
        self._inflight: Dict[int, Tuple[object, Pending, float]] = {}

    def run(self, ops: Iterable[object]) -> None:
        """Runs ``ops`` (ScheduleOps of one rank, in op order). Dependencies on ops outside
        the list (the model's own: attention, the LM head) are taken as met."""
        for op in sorted(ops, key=lambda o: o.id):
            kernel = self.kernels.get(op.name)
            if kernel is None:
                raise Error(f"torch executor: op {op.id} (rank {op.rank}, '{op.name}', "
                            f"{op.phase}) has no kernel")
            for dep in [op.prev, *op.deps]:
                if dep in self._inflight:
                    self.finish(dep)
            start = time.perf_counter()
            pending = kernel(op)
            if pending is None:
                self.times.record(op.id, start, time.perf_counter())
            else:
                self._inflight[op.id] = (op, pending, start)
        self.finish_all()

    def finish(self, op_id: int) -> None:
        op, pending, start = self._inflight.pop(op_id)
        pending.wait()
        self.times.record(op_id, start, time.perf_counter())

    def finish_all(self) -> None:
        for op_id in sorted(self._inflight):
            if op_id in self._inflight:
                self.finish(op_id)
