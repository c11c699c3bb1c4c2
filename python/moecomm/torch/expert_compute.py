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

import numpy as np

import torch
import torch.nn.functional as F

Saved = Tuple[torch.Tensor, ...]  # per row: gelu (x, h, a); swiglu (x, g, u, a); or (x,)
# Experts with unequal row counts run as one batched GEMM over rows padded to the largest
# count while the padding is at most this share of the padded rows; past it, one GEMM per
# expert. Padded rows carry zeros in the backward, so they add exact zeros to the gradients.
MOST_PADDING = 0.5


def padded_rows(sizes: Sequence[int]) -> Optional[Tuple[int, np.ndarray]]:
    """(rows per expert m, where row k of the experts' order sits among the L x m padded
    rows) when unequal counts run as one padded batch; None when they do not."""
    most, total = max(sizes, default=0), sum(sizes)
    if len(set(sizes)) <= 1 or total == 0 or len(sizes) * most * MOST_PADDING > total:
        return None
    s = np.asarray(sizes, np.int64)
    starts = np.cumsum(s) - s
    return most, (np.repeat(np.arange(len(sizes)) * most - starts, s)
                  + np.arange(total, dtype=np.int64))


class Batches:
    """How an expert op's rows run: as one batch [L, m] (equal counts, or padded to m), or
    one batch of one per expert with rows. Under padding the GEMMs' layout (``compute_rows``
    rows) holds the real rows at ``pad`` (a device index) and pad rows at ``fill``: the
    token path gathers straight into it (a pad row's input is any real row's: its output
    is never read), and the backward zeroes the pad rows' output gradients, so they add
    exact zeros to the parameters' gradients."""

    def __init__(self, sizes: Sequence[int],
                 padded: Optional[Tuple[int, torch.Tensor, torch.Tensor]]) -> None:
        self.sizes, self.rows = list(sizes), sum(sizes)
        self.pad = self.fill = None
        if padded is not None:
            most, self.pad, self.fill = padded
            self.parts = [(0, len(sizes), 0, most)]
            self.compute_rows = len(sizes) * most
        elif len(set(sizes)) == 1:
            self.parts = [(0, len(sizes), 0, sizes[0])] if sizes[0] else []
            self.compute_rows = self.rows
        else:
            self.parts, row = [], 0
            for l, s in enumerate(sizes):
                if s:
                    self.parts.append((l, 1, row, s))
                row += s
            self.compute_rows = self.rows

    def to_compute(self, t: torch.Tensor) -> torch.Tensor:
        """Rows in the experts' order -> the GEMMs' layout (pad rows zero)."""
        if self.pad is None:
            return t
        return t.new_zeros((self.compute_rows, *t.shape[1:])).index_copy_(0, self.pad, t)

    def from_compute(self, t: torch.Tensor) -> torch.Tensor:
        return t if self.pad is None else t.index_select(0, self.pad)


def pad_positions(compute_rows: int, real: np.ndarray) -> np.ndarray:
    """The rows of a padded layout that hold no real row."""
    used = np.zeros(compute_rows, bool)
    used[real] = True
    return np.flatnonzero(~used).astype(np.int64)


def _rows(t: torch.Tensor, part: slice) -> torch.Tensor:
    """``t[part]``, without a view op where the part is all of it (one batch of every
    expert: the common case, whose ops should not grow)."""
    return t if part.start == 0 and part.stop >= t.shape[0] else t[part]


class ExpertBank:
    """The local experts of one layer: ``params`` stacked over them ([L, ...] in
    torch.nn.Linear's layout: gelu's w1, b1, w2, b2; swiglu's w1, w3, w2); ``output_bias``:
    whether this ESP shard adds b2 (the shards' outputs are summed). Saved activations are
    kept in the GEMMs' layout (``Batches``)."""

    def __init__(self, ffn_type: str, params: Sequence[torch.Tensor], output_bias: bool) -> None:
        self.gelu = ffn_type == "gelu"
        self.params = list(params)
        self.output_bias = output_bias

    def _hidden(self, x: torch.Tensor, e: slice) -> Saved:
        """The FFN up to its activation on batched rows x [G, r, hidden]."""
        if self.gelu:
            w1, b1 = _rows(self.params[0], e), _rows(self.params[1], e)
            h = torch.baddbmm(b1.unsqueeze(1), x, w1.transpose(1, 2))
            return h, F.gelu(h)
        w1, w3 = _rows(self.params[0], e), _rows(self.params[1], e)
        g, u = torch.bmm(x, w1.transpose(1, 2)), torch.bmm(x, w3.transpose(1, 2))
        return g, u, F.silu(g) * u

    def _output(self, a: torch.Tensor, e: slice, out: torch.Tensor) -> None:
        w2 = _rows(self.params[2], e).transpose(1, 2)
        if self.gelu and self.output_bias:
            torch.baddbmm(_rows(self.params[3], e).unsqueeze(1), a, w2, out=out)
        else:
            torch.bmm(a, w2, out=out)

    def forward(self, x: torch.Tensor, b: Batches, keep: bool) -> Tuple[torch.Tensor, Saved]:
        """Rows x in the GEMMs' layout -> (y, same layout; what the backward needs: every
        activation when ``keep``, else x alone)."""
        hidden = self.params[2].shape[1]
        y = x.new_empty((x.shape[0], hidden))
        kept: List[List[torch.Tensor]] = []
        for first, count, row, r in b.parts:
            e, rows = slice(first, first + count), slice(row, row + count * r)
            acts = self._hidden(_rows(x, rows).view(count, r, -1), e)
            self._output(acts[-1], e, _rows(y, rows).view(count, r, hidden))
            kept.append([a.reshape(count * r, -1) for a in acts])
        if not keep:
            return y, (x,)
        if kept:
            saved = [torch.cat(a) if len(a) != 1 else a[0] for a in zip(*kept)]
        else:
            saved = [x.new_empty((0, self.params[0].shape[1]))
                     for _ in range(2 if self.gelu else 3)]
        return y, (x, *saved)

    def recompute(self, x: torch.Tensor, b: Batches) -> Saved:
        """What ``forward(keep=True)`` saves, from its saved x."""
        return self.forward(x, b, keep=True)[1]

    def backward(self, dy: torch.Tensor, b: Batches, saved: Saved,
                 grads: Sequence[torch.Tensor]) -> torch.Tensor:
        """Output gradient rows -> input gradient rows (the GEMMs' layout; ``dy``'s pad rows
        are zeroed in place); adds the experts' parameter gradients into ``grads`` (stacked
        as ``params``)."""
        if b.fill is not None and b.fill.numel():
            dy.index_fill_(0, b.fill, 0)
        dx = dy.new_empty(saved[0].shape)
        for first, count, row, r in b.parts:
            e, rows = slice(first, first + count), slice(row, row + count * r)
            batch = lambda t: _rows(t, rows).view(count, r, -1)
            acts = [batch(t) for t in saved[1:]]
            self._backward(batch(dy), batch(saved[0]), acts, e, grads, batch(dx))
        return dx

    def _backward(self, dy: torch.Tensor, x: torch.Tensor, acts: List[torch.Tensor],
                  e: slice, grads: Sequence[torch.Tensor], dx: torch.Tensor) -> None:
        p = [_rows(t, e) for t in self.params]
        if self.gelu:
            h, a = acts
            g1, gb1, g2, gb2 = (_rows(g, e) for g in grads)
            da = torch.bmm(dy, p[2])
            g2.baddbmm_(dy.transpose(1, 2), a)
            if self.output_bias:
                gb2.add_(dy.sum(1))
            dh = torch.ops.aten.gelu_backward(da, h)
            g1.baddbmm_(dh.transpose(1, 2), x)
            gb1.add_(dh.sum(1))
            torch.bmm(dh, p[0], out=dx)
            return
        g, u, a = acts
        g1, g3, g2 = (_rows(t, e) for t in grads)
        da = torch.bmm(dy, p[2])
        g2.baddbmm_(dy.transpose(1, 2), a)
        du = da * F.silu(g)
        dg = torch.ops.aten.silu_backward(da * u, g)
        g1.baddbmm_(dg.transpose(1, 2), x)
        g3.baddbmm_(du.transpose(1, 2), x)
        torch.baddbmm(torch.bmm(dg, p[0]), du, p[1], out=dx)


class SavedActivations:
    """The forward expert ops' saved rows (in their GEMMs' layout), found again by canonical
    row id (exchange_plan.ExpertRows.canonical) by backward expert ops, which may cut them
    otherwise (FSMoE's per-phase degree): then one gather puts them in the backward op's
    order."""

    def __init__(self, rows: int) -> None:
        self.rows = rows  # canonical ids run over [0, rows)
        self._ops: List[Tuple[np.ndarray, Batches, Saved]] = []
        self._whole: Optional[Tuple[np.ndarray, Saved]] = None

    def add(self, canonical: np.ndarray, batches: Batches, saved: Saved) -> None:
        self._ops.append((canonical, batches, saved))

    def take(self, canonical: np.ndarray, batches: Batches) -> Saved:
        """The saved rows with these ids, in this order, laid out for ``batches``."""
        for ids, _, saved in self._ops:
            if ids.shape == canonical.shape and np.array_equal(ids, canonical):
                return saved  # the same rows: the same batches
        if self._whole is None:
            position = np.empty(self.rows, np.int64)
            at = 0
            for ids, _, _ in self._ops:
                position[ids] = np.arange(at, at + ids.size)
                at += ids.size
            kinds = zip(*([b.from_compute(t) for t in saved] for _, b, saved in self._ops))
            self._whole = (position, tuple(torch.cat(list(k)) for k in kinds))
        position, whole = self._whole
        device = whole[0].device
        index = torch.from_numpy(position[canonical]).to(device, non_blocking=True)
        return tuple(batches.to_compute(t.index_select(0, index)) for t in whole)
