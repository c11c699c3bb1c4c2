"""Process groups for a schedule's collectives, created once on every rank in one order (
``torch.distributed.new_group`` is collective over the whole world)."""
from __future__ import annotations

import datetime
import math
import numbers
from typing import Dict, Iterable, List, Optional, Sequence, Tuple, Union

import torch
import torch.distributed as dist

from .. import Error, _moecomm


Timeout = Union[datetime.timedelta, int, float, None]


def group_timeout(group: Optional[dist.ProcessGroup] = None) -> Optional[datetime.timedelta]:
    """The timeout a process group was made with (default: the default group's, what
    ``init_process_group(timeout=...)`` set), or None where torch does not expose it. Torch
    1.13's gloo and NCCL groups carry it in ``options``; torch 2's ProcessGroup keeps it on
    the backend of its device."""
    pg = group if group is not None else dist.distributed_c10d._get_default_group()
    try:
        options = getattr(pg, "options", None)
        if options is None:
            options = pg._get_backend(torch.device("cpu")).options
        timeout = options._timeout
    except (AttributeError, RuntimeError):
        return None
    return timeout if isinstance(timeout, datetime.timedelta) else None


def check_timeout(timeout: Timeout, owner: str) -> Optional[datetime.timedelta]:
    """The ``timeout`` argument as a timedelta (None stays None: the default group's)."""
    if timeout is None:
        return None
    if isinstance(timeout, datetime.timedelta):
        seconds = timeout.total_seconds()
    elif isinstance(timeout, numbers.Real) and not isinstance(timeout, bool):
        seconds = float(timeout)
    else:
        raise Error(f"{owner}: timeout must be a datetime.timedelta or a number of seconds, "
                    f"got a {type(timeout).__name__}")
    if not (math.isfinite(seconds) and seconds > 0):
        raise Error(f"{owner}: timeout must be positive and finite, got {timeout!r}")
    return timeout if isinstance(timeout, datetime.timedelta) else \
        datetime.timedelta(seconds=seconds)


class GroupRegistry:
    """One process group per distinct set of ranks: the schedule's collective groups.
    Schedule rank r is world rank r.

    Every group is made with ``timeout``, so a collective whose peer stalls or died fails
    after it instead of waiting for torch's default (half an hour). Without one (None), the
    groups take the default group's timeout, and a collective over the whole world runs on
    the default group itself; with one, the whole world gets a group of its own too, so every
    collective the schedule runs honours it. The choice depends only on the argument, so
    every rank creates the same groups in the same order (``new_group`` is collective)."""

    def __init__(self, rank_sets: Iterable[Sequence[int]],
                 timeout: Optional[datetime.timedelta] = None) -> None:
        self._groups: Dict[Tuple[int, ...], Optional[dist.ProcessGroup]] = {}
        self.timeout = timeout if timeout is not None else (
            group_timeout() or dist.distributed_c10d.default_pg_timeout)
        world = dist.get_world_size()
        for ranks in sorted({tuple(sorted(int(r) for r in s)) for s in rank_sets}):
            if ranks == tuple(range(world)) and timeout is None:
                self._groups[ranks] = None  # the default group
            else:
                self._groups[ranks] = dist.new_group(list(ranks), timeout=self.timeout)

    def get(self, ranks: Sequence[int]) -> Optional[dist.ProcessGroup]:
        key = tuple(sorted(int(r) for r in ranks))
        if key not in self._groups:
            raise Error(f"torch executor: no process group was created for ranks {list(key)}")
        return self._groups[key]


def nodes_of(group: Sequence[int], ranks_per_node: int) -> List[List[int]]:
    """Member indices of ``group`` by node (node = rank // ranks_per_node), nodes ascending;
    empty when nodes hold different numbers of members (sched::members_by_node)."""
    return _moecomm.members_by_node([int(r) for r in group], int(ranks_per_node))


class ScheduleGroups:
    """Every process group a schedule's collectives run on, created on every rank. Routed
    A2As (collectives.a2a_by_algorithm) send point to point inside their collective's group,
    so they need no sub-groups; ``ranks_per_node`` says which ranks share a node; ``timeout``
    (check_timeout's result) is every group's (GroupRegistry)."""

    def __init__(self, schedule: object, ranks_per_node: int,
                 timeout: Optional[datetime.timedelta] = None) -> None:
        self.ranks_per_node = ranks_per_node
        sets = []
        for r in range(schedule.world_size):
            for o in schedule.ops(r):
                if o.collective < 0:
                    continue
                sets.append(schedule.collective(o.collective).group)
        self.registry = GroupRegistry(sets, timeout)

    def get(self, ranks: Sequence[int]) -> Optional[dist.ProcessGroup]:
        return self.registry.get(ranks)
