"""The local experts' forward and backward on rows grouped by expert, with the activations
autograd would keep (x, and the FFN's hidden pre-activation and activation), so the backward
needs no recomputation of the forward unless the schedule asks for it (``recompute_experts``).

Experts with equal row counts run as one batched GEMM (``torch.bmm`` over [experts, rows,
features]: expert choice, capacity); otherwise each expert with rows runs the same batched
form on a batch of one. Either way the ops per expert are a constant: the GEMMs and their
element-wise companions, nothing else.

gelu FFN (GPT, with biases): h = x W1^T + b1, a = gelu(h), y = a W2^T + b2.
  dA = dy W2, dW2 = dy^T a, db2 = sum dy, dh = gelu'(h) dA, dW1 = dh^T x, db1 = sum dh,
  dx = dh W1.
swiglu FFN (Mixtral): g = x W1^T, u = x W3^T, a = silu(g) u, y = a W2^T.
  dA = dy W2, dW2 = dy^T a, du = dA silu(g), dg = silu'(g) (dA u), dW1 = dg^T x,
  dW3 = du^T x, dx = dg W1 + du W3.
The element-wise derivatives are aten's own (gelu_backward, silu_backward), as autograd's.
"""
from __future__ import annotations

from typing import List, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F

Saved = Tuple[torch.Tensor, ...]  # per row: gelu (x, h, a); swiglu (x, g, u, a); or (x,)


def groups(sizes: Sequence[int]) -> List[Tuple[int, int, int, int]]:
    """(first expert, experts, first row, rows per expert) of each batched GEMM: one for all
    experts when their row counts are equal, else one per expert with rows."""
    if len(set(sizes)) == 1:
        return [(0, len(sizes), 0, sizes[0])] if sizes[0] else []
    out, row = [], 0
    for l, s in enumerate(sizes):
        if s:
            out.append((l, 1, row, s))
        row += s
    return out


class ExpertBank:
    """The local experts of one layer: ``params`` stacked over them ([L, ...] in
    torch.nn.Linear's layout: gelu's w1, b1, w2, b2; swiglu's w1, w3, w2); ``output_bias``:
    whether this ESP shard adds b2 (the shards' outputs are summed)."""

    def __init__(self, ffn_type: str, params: Sequence[torch.Tensor], output_bias: bool) -> None:
        self.gelu = ffn_type == "gelu"
        self.params = list(params)
        self.output_bias = output_bias

    def _hidden(self, x: torch.Tensor, e: slice) -> Saved:
        """The FFN up to its activation on batched rows x [G, r, hidden]."""
        if self.gelu:
            w1, b1 = self.params[0][e], self.params[1][e]
            h = torch.baddbmm(b1.unsqueeze(1), x, w1.transpose(1, 2))
            return h, F.gelu(h)
        w1, w3 = self.params[0][e], self.params[1][e]
        g, u = torch.bmm(x, w1.transpose(1, 2)), torch.bmm(x, w3.transpose(1, 2))
        return g, u, F.silu(g) * u

    def _output(self, a: torch.Tensor, e: slice, out: torch.Tensor) -> None:
        w2 = self.params[2][e].transpose(1, 2)
        if self.gelu and self.output_bias:
            torch.baddbmm(self.params[3][e].unsqueeze(1), a, w2, out=out)
        else:
            torch.bmm(a, w2, out=out)

    def forward(self, x: torch.Tensor, sizes: Sequence[int], keep: bool
                ) -> Tuple[torch.Tensor, Saved]:
        """Rows x (each expert's contiguous, ``sizes`` of them) -> (y, what the backward
        needs: every activation when ``keep``, else x alone)."""
        hidden = self.params[2].shape[1]
        y = x.new_empty((x.shape[0], hidden))
        kept: List[List[torch.Tensor]] = []
        for first, count, row, r in groups(sizes):
            e, rows = slice(first, first + count), slice(row, row + count * r)
            acts = self._hidden(x[rows].view(count, r, -1), e)
            self._output(acts[-1], e, y[rows].view(count, r, hidden))
            kept.append([a.reshape(count * r, -1) for a in acts])
        if not keep:
            return y, (x,)
        saved = [torch.cat(a) if len(a) != 1 else a[0] for a in zip(*kept)] if kept else [
            x.new_empty((0, self.params[0].shape[1])) for _ in range(2 if self.gelu else 3)]
        return y, (x, *saved)

    def recompute(self, x: torch.Tensor, sizes: Sequence[int]) -> Saved:
        """What ``forward(keep=True)`` saves, from x alone."""
        return self.forward(x, sizes, keep=True)[1]

    def backward(self, dy: torch.Tensor, sizes: Sequence[int], saved: Saved,
                 grads: Sequence[torch.Tensor]) -> torch.Tensor:
        """Output gradient rows -> input gradient rows; adds the experts' parameter gradients
        into ``grads`` (stacked as ``params``)."""
        dx = dy.new_empty(saved[0].shape)
        for first, count, row, r in groups(sizes):
            e, rows = slice(first, first + count), slice(row, row + count * r)
            batch = lambda t: t[rows].view(count, r, -1)
            dy3, x3 = batch(dy), batch(saved[0])
            acts = [batch(t) for t in saved[1:]]
            self._backward(dy3, x3, acts, e, grads, dx[rows].view(count, r, -1))
        return dx

    def _backward(self, dy: torch.Tensor, x: torch.Tensor, acts: List[torch.Tensor],
                  e: slice, grads: Sequence[torch.Tensor], dx: torch.Tensor) -> None:
        p = self.params
        if self.gelu:
            h, a = acts
            g1, gb1, g2, gb2 = (g[e] for g in grads)
            da = torch.bmm(dy, p[2][e])
            g2.baddbmm_(dy.transpose(1, 2), a)
            if self.output_bias:
                gb2.add_(dy.sum(1))
            dh = torch.ops.aten.gelu_backward(da, h)
            g1.baddbmm_(dh.transpose(1, 2), x)
            gb1.add_(dh.sum(1))
            torch.bmm(dh, p[0][e], out=dx)
            return
        g, u, a = acts
        g1, g3, g2 = (t[e] for t in grads)
        da = torch.bmm(dy, p[2][e])
        g2.baddbmm_(dy.transpose(1, 2), a)
        du = da * F.silu(g)
        dg = torch.ops.aten.silu_backward(da * u, g)
        g1.baddbmm_(dg.transpose(1, 2), x)
        g3.baddbmm_(du.transpose(1, 2), x)
        torch.baddbmm(torch.bmm(dg, p[0][e]), du, p[1][e], out=dx)


class SavedActivations:
    """The forward expert ops' saved rows, found again by canonical row id
    (exchange_plan.ExpertRows.canonical) by backward expert ops that may cut them otherwise."""

    def __init__(self, rows: int) -> None:
        self.rows = rows
        self._ops: List[Tuple[object, Saved]] = []
        self._whole: Optional[Tuple[torch.Tensor, Saved]] = None

    def add(self, canonical: object, saved: Saved) -> None:
        self._ops.append((canonical, saved))

    def take(self, canonical, device: torch.device) -> Saved:
        """The saved rows with these ids, in this order."""
        import numpy as np
        for ids, saved in self._ops:
            if ids.shape == canonical.shape and np.array_equal(ids, canonical):
                return saved
        if self._whole is None:
            position = np.empty(self.rows, np.int64)
            at = 0
            for ids, _ in self._ops:
                position[ids] = np.arange(at, at + ids.size)
                at += ids.size
            parts = list(zip(*(s for _, s in self._ops)))
            self._whole = (position, tuple(torch.cat(p) for p in parts))
        position, whole = self._whole
        index = torch.from_numpy(position[canonical]).to(device, non_blocking=True)
        return tuple(t.index_select(0, index) for t in whole)
