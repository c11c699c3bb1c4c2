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
