"""Process groups for a schedule's collectives, created once on every rank in one order (
``torch.distributed.new_group`` is collective over the whole world)."""
from __future__ import annotations

from typing import Dict, Iterable, List, Optional, Sequence, Tuple

import torch.distributed as dist

from .. import Error, _moecomm


class GroupRegistry:
    """One process group per distinct set of ranks: the schedule's collective groups.
    Schedule rank r is world rank r."""

    def __init__(self, rank_sets: Iterable[Sequence[int]]) -> None:
        self._groups: Dict[Tuple[int, ...], Optional[dist.ProcessGroup]] = {}
        world = dist.get_world_size()
        for ranks in sorted({tuple(sorted(int(r) for r in s)) for s in rank_sets}):
            if ranks == tuple(range(world)):
                self._groups[ranks] = None  # the default group
            else:
                self._groups[ranks] = dist.new_group(list(ranks))

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
    so they need no sub-groups; ``ranks_per_node`` says which ranks share a node."""

    def __init__(self, schedule: object, ranks_per_node: int) -> None:
        self.ranks_per_node = ranks_per_node
        sets = []
        for r in range(schedule.world_size):
            for o in schedule.ops(r):
                if o.collective < 0:
                    continue
                sets.append(schedule.collective(o.collective).group)
        self.registry = GroupRegistry(sets)

    def get(self, ranks: Sequence[int]) -> Optional[dist.ProcessGroup]:
        return self.registry.get(ranks)
