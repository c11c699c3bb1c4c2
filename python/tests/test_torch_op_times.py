"""moecomm.torch's OpTimes: the host's clock on CPU, as before; on a CUDA device, events whose
times are resolved only when ``spans`` is read (a fake event class stands in for
torch.cuda.Event: the suite runs without a GPU)."""
from __future__ import annotations

from conftest import require

torch = require("torch")

from moecomm.torch.runner import OpTimes  # noqa: E402


class Clock:
    """A device's clock, in milliseconds, and what was asked of its events."""

    def __init__(self) -> None:
        self.ms = 0.0
        self.recorded = 0
        self.synchronized = 0


class FakeEvent:
    """torch.cuda.Event's timing interface: recorded at the clock's time, complete only
    once synchronized (as a CUDA event's elapsed_time needs both ends complete)."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.ms = clock.ms
        self.done = False
        clock.recorded += 1

    def synchronize(self) -> None:
        self.done = True
        self.clock.synchronized += 1

    def elapsed_time(self, end: "FakeEvent") -> float:
        assert self.done and end.done, "elapsed_time of an event not yet complete"
        return end.ms - self.ms


def test_cpu_spans_are_host_clock_seconds_since_origin():
    times = OpTimes()
    assert times.device == torch.device("cpu")
    assert OpTimes("cpu").device == torch.device("cpu")
    assert OpTimes(torch.device("cpu")).device == torch.device("cpu")
    stamps = [times.now() for _ in range(4)]
    assert all(isinstance(s, float) for s in stamps)
    assert stamps == sorted(stamps) and times.origin <= stamps[0]
    times.record(7, stamps[0], stamps[1])
    times.record(3, stamps[2], stamps[3])
    assert 7 in times and 3 in times and 5 not in times
    want = {7: (stamps[0] - times.origin, stamps[1] - times.origin),
            3: (stamps[2] - times.origin, stamps[3] - times.origin)}
    assert times.spans == want
    assert list(times.spans) == [7, 3]  # the order recorded
    # Recorded after a read: resolved at the next one; a second record of an op replaces it.
    times.record(5, stamps[1], stamps[2])
    times.record(7, stamps[1], stamps[3])
    want[5] = (stamps[1] - times.origin, stamps[2] - times.origin)
    want[7] = (stamps[1] - times.origin, stamps[3] - times.origin)
    assert times.spans == want


def test_events_are_resolved_only_when_read():
    clock = Clock()
    times = OpTimes("cuda", event=lambda: FakeEvent(clock))
    assert times.device == torch.device("cuda")
    clock.ms = 10.0
    s1 = times.now()
    clock.ms = 12.5
    e1 = times.now()
    times.record(1, s1, e1)
    clock.ms = 20.0
    s2 = times.now()
    clock.ms = 26.0
    e2 = times.now()
    times.record(2, s2, e2)
    # Stamps and records wait for nothing: a step never synchronizes with the device.
    assert clock.recorded == 5 and clock.synchronized == 0
    assert 1 in times and 2 in times and 3 not in times
    assert clock.synchronized == 0
    assert times.spans == {1: (0.01, 0.0125), 2: (0.02, 0.026)}
    synced = clock.synchronized
    assert synced > 0
    # A second read resolves nothing again.
    assert times.spans == {1: (0.01, 0.0125), 2: (0.02, 0.026)}
    assert clock.synchronized == synced
    # One recorded after the read: only its events are waited for, at the next read.
    clock.ms = 30.0
    s3 = times.now()
    clock.ms = 31.0
    e3 = times.now()
    times.record(3, s3, e3)
    assert clock.synchronized == synced
    assert times.spans == {1: (0.01, 0.0125), 2: (0.02, 0.026), 3: (0.03, 0.031)}
    assert clock.synchronized > synced


def test_event_spans_count_from_the_origin_event():
    clock = Clock()
    clock.ms = 4.0
    times = OpTimes(torch.device("cuda", 0), event=lambda: FakeEvent(clock))
    assert times.device == torch.device("cuda", 0)
    clock.ms = 5.0
    start = times.now()
    clock.ms = 9.0
    times.record(0, start, times.now())
    assert times.spans == {0: (0.001, 0.005)}
