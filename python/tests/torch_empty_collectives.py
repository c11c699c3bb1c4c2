"""Each collective of moecomm.torch.collectives with no rows on any member, on 4 gloo
processes: it gives an empty tensor of the rows' trailing shape on every rank, and the ranks
stay in step (a collective with rows after it gets what each member sent)."""
from __future__ import annotations

import torch
import torch.distributed as dist

from torch_spawn import guarded, run_on_ranks

COLS = (3, 2)  # the rows' trailing shape


def _after(rank: int) -> list:
    """An AllGather-v with rows (member i gives i + 1 rows of value i): the same on every rank
    when every rank skipped the empty collectives before it together."""
    from moecomm.torch import collectives as col
    block = torch.full((rank + 1, *COLS), float(rank))
    got = col.all_gather_v(block, [1, 2, 3, 4], None).wait()
    return got[:, 0, 0].tolist()


def run_collectives(rank: int) -> dict:
    from moecomm.torch import collectives as col
    empty = torch.empty((0, *COLS))
    n = dist.get_world_size()
    _, steps = col.member_routing("pairwise", (0, 1, 2, 3), 2, rank)
    shapes = {
        "all_gather_v": col.all_gather_v(empty, [0] * n, None).wait().shape,
        "reduce_scatter_v": col.reduce_scatter_v(empty, [0] * n, None).wait().shape,
        "all_to_all_v": col.all_to_all_v(empty, [0] * n, [0] * n, None).wait().shape,
        "routed_all_to_all": col.routed_all_to_all(empty, [[0] * n] * n, rank, steps,
                                                   [0, 1, 2, 3], None).wait().shape,
        "all_reduce": col.all_reduce(empty.clone(), None).wait().shape,
    }
    return {"shapes": {k: list(v) for k, v in shapes.items()}, "after": _after(rank)}


def run_rank(rank: int) -> dict:
    return guarded(run_collectives, rank)


def run_all(outdir: str) -> list:
    return run_on_ranks(run_rank, outdir)
