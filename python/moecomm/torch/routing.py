"""Gates and orders of the torch MoE layer (the same formulas as moecomm's nn layer):

- ``gshard`` (GShard Sec. 2.2): p = softmax(x Wg^T); top-k of p; weights p of the chosen,
  renormalised over them when k > 1.
- ``sigmoid`` (BASE / StableMoE eqs. 1-3): top-k of h = x Wg^T; weights sigmoid(h).
- ``xmoe`` (X-MoE Sec. 3): s = <z/|z|, v_e/|v_e|> / tau with z = x Wp^T; top-k of s; weights
  softmax(s) of the chosen, renormalised when k > 1.
- ``expert-choice`` (Zhou et al. Sec. 3.1): S = softmax(x Wg^T); expert e takes its top-C
  tokens, C = min(T, ceil(c T / E)); weight S[t, e].

A routing is a list of slots (token, expert, weight). The order keeps every slot
(``dropless``) or, with a capacity factor f, each expert's first C = ceil(f T k / E) slots in
slot order (token-major; GShard's local capacity), the rest dropped.
"""
from __future__ import annotations

import difflib
import math
import numbers
from dataclasses import dataclass
from typing import Optional

import torch
import torch.nn.functional as F

from .. import Error

GATES = ("gshard", "sigmoid", "xmoe", "expert-choice")  # as `moecomm train --gate`


@dataclass
class Routing:
    """Kept slots sorted by expert (stable): ``token[s]`` goes to ``expert[s]`` and its
    output is scaled by ``weight[s]`` (differentiable); ``counts[e]`` slots per expert."""
    token: torch.Tensor
    expert: torch.Tensor
    weight: torch.Tensor
    counts: torch.Tensor


def choose(gate: str, x: torch.Tensor, weight: torch.Tensor, top_k: int,
           capacity_factor: Optional[float], experts: int,
           embeddings: Optional[torch.Tensor] = None, temperature: float = 0.07):
    """(token [S], expert [S], weight [S]) of every slot, slot order, before the order."""
    tokens = x.shape[0]
    if gate == "expert-choice":
        scores = torch.softmax(x @ weight.t(), dim=-1)
        c = 1.0 if capacity_factor is None else capacity_factor
        cap = min(tokens, math.ceil(c * tokens / experts))
        top = torch.topk(scores.t(), cap, dim=-1)  # [E, C]
        expert = torch.arange(experts, device=x.device).repeat_interleave(cap)
        return top.indices.reshape(-1), expert, top.values.reshape(-1)
    if gate == "xmoe":
        z = F.normalize(x @ weight.t(), dim=-1)
        scores = z @ F.normalize(embeddings, dim=-1).t() / temperature
        probs = torch.softmax(scores, dim=-1)
    else:
        scores = x @ weight.t()
        probs = torch.softmax(scores, dim=-1) if gate == "gshard" else torch.sigmoid(scores)
    chosen = torch.topk(scores, top_k, dim=-1).indices  # [T, k]
    w = probs.gather(1, chosen)
    if gate != "sigmoid" and top_k > 1:
        w = w / w.sum(dim=-1, keepdim=True)
    token = torch.arange(tokens, device=x.device).repeat_interleave(top_k)
    return token, chosen.reshape(-1), w.reshape(-1)


def order(token: torch.Tensor, expert: torch.Tensor, weight: torch.Tensor, experts: int,
          capacity: Optional[int]) -> Routing:
    """Keeps each expert's first ``capacity`` slots (None: all) and sorts them by expert."""
    keep = torch.ones_like(expert, dtype=torch.bool)
    if capacity is not None:
        one_hot = F.one_hot(expert, experts)
        position = (one_hot.cumsum(0) * one_hot).sum(-1) - 1  # slot's place at its expert
        keep = position < capacity
    idx = torch.nonzero(keep).reshape(-1)
    by_expert = torch.sort(expert[idx], stable=True).indices
    idx = idx[by_expert]
    counts = torch.bincount(expert[idx], minlength=experts)
    return Routing(token[idx], expert[idx], weight[idx], counts)


def capacity_of(gate: str, capacity_factor: Optional[float], tokens: int, top_k: int,
                experts: int) -> Optional[int]:
    """Slots an expert keeps per rank (None: dropless); expert choice is balanced already."""
    if capacity_factor is None or gate == "expert-choice":
        return None
    return math.ceil(capacity_factor * tokens * top_k / experts)


def check_gate(gate: str) -> None:
    if gate not in GATES:
        near = difflib.get_close_matches(gate, GATES, n=1, cutoff=0.8)
        hint = f"; did you mean '{near[0]}'?" if near else ""
        raise Error(f"MoELayer: gate must be one of {', '.join(GATES)}, got '{gate}'{hint}")


def check_temperature(temperature: float, who: str) -> None:
    """xmoe's scores are cosines divided by tau: tau = 0 makes them infinite and the softmax
    NaN, a negative tau ranks the experts backwards."""
    if (isinstance(temperature, bool) or not isinstance(temperature, numbers.Real)
            or not (math.isfinite(temperature) and temperature > 0)):
        raise Error(f"{who}: temperature must be a finite number > 0 (the xmoe gate divides "
                    f"its scores by it), got {temperature!r}")
