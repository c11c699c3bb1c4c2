"""Process groups for a schedule's collectives, created once on every rank in one order (
``torch.distributed.new_group`` is collective over the whole world)."""
from __future__ import annotations

from typing import Dict, Iterable, List, Optional, Sequence, Tuple

import torch.distributed as dist

from .. import Error


class GroupRegistry:
    """One process group per distinct set of ranks: the schedule's collective groups and the
    node sub-groups their hierarchical A2As use. Schedule rank r is world rank r."""

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
    empty when nodes hold different numbers of members (hierarchical A2A does not apply)."""
    by_node: Dict[int, List[int]] = {}
    for m, r in enumerate(group):
        by_node.setdefault(int(r) // ranks_per_node, []).append(m)
    nodes = [by_node[k] for k in sorted(by_node)]
    return nodes if len({len(n) for n in nodes}) == 1 else []


def hierarchical_rank_sets(group: Sequence[int], ranks_per_node: int) -> List[List[int]]:
    """The sub-groups (world ranks) that 1DH and 2DH A2As over ``group`` run on."""
    nodes = nodes_of(group, ranks_per_node)
    if not nodes:
        return []
    g = [int(r) for r in group]
    out = [[g[m] for m in node] for node in nodes]
    out += [[g[node[l]] for node in nodes] for l in range(len(nodes[0]))]
    out.append([g[node[0]] for node in nodes])
    return out


class ScheduleGroups:
    """Every process group a schedule's collectives run on, created on every rank: the
    collectives' groups and the node, cross-node and leader sub-groups of its 1DH and 2DH
    A2As (node = rank // ranks_per_node)."""

    def __init__(self, schedule: object, ranks_per_node: int) -> None:
        self.ranks_per_node = ranks_per_node
        sets = []
        for r in range(schedule.world_size):
            for o in schedule.ops(r):
                if o.collective < 0:
                    continue
                c = schedule.collective(o.collective)
                sets.append(c.group)
                if c.algorithm in ("1dh", "2dh"):
                    sets += hierarchical_rank_sets(c.group, ranks_per_node)
        self.registry = GroupRegistry(sets)

    def get(self, ranks: Sequence[int]) -> Optional[dist.ProcessGroup]:
        return self.registry.get(ranks)

    def nodes(self, group: Sequence[int]) -> List[List[int]]:
        """``group``'s member indices by node; an error where nodes hold unequal shares."""
        found = nodes_of(group, self.ranks_per_node)
        if not found:
            raise Error(f"torch executor: a hierarchical A2A over ranks {list(group)} needs "
                        f"the same number of them on every node")
        return found

    def routed(self, group: Sequence[int], kind: str, member: int) -> Optional[dist.ProcessGroup]:
        """The sub-group of ``kind`` (collectives.hierarchical_plan's) holding ``member``."""
        nodes = self.nodes(group)
        g = list(group)
        node = next(n for n in nodes if member in n)
        if kind == "node":
            return self.get([g[m] for m in node])
        if kind == "across":
            return self.get([g[n[node.index(member)]] for n in nodes])
        return self.get([g[n[0]] for n in nodes])
