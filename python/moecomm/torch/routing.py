"""Gates and orders of the torch MoE layer (the same formulas as moecomm's nn layer):

- ``gshard`` (GShard Sec. 2.2): p = softmax(x Wg^T); top-k of p; weights p of the chosen,
  renormalised over them when k > 1.
- ``sigmoid`` (BASE / StableMoE eqs. 1-3): top-k of h = x Wg^T; weights sigmoid(h).
- ``xmoe`` (X-MoE Sec. 3): s = <z/|z|, v_e/|v_e|> / tau with z = x Wp^T; top-k of s; weights
  softmax(s) of the chosen, renormalised when k > 1.
- ``expert-choice`` (Zhou et al. Sec. 3.1): S = softmax(x Wg^T); expert e takes its top-C
  tokens, C = min(T, ceil(c T / E)); weight S[t, e].

Node-limited routing (DeepSeek-V2 Sec. 2.2.2, DeepSeek-V3 Sec. 2.1.2; the rule of moecomm's
nn gates, gate_math.h): with ``router_groups`` > 1 and 0 < ``router_group_top_k`` <
``router_groups``, the experts split into equal contiguous groups; a token's group score is
the sum of the two largest affinities (the probabilities above, sigmoid(h) for ``sigmoid``)
of the group's experts (the one affinity where a group has one expert), it keeps its best
``router_group_top_k`` groups (ties: lower group) and takes its top-k among their experts.

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

from .. import Error, _args, _moecomm

GATES = ("gshard", "sigmoid", "xmoe", "expert-choice")  # as `moecomm train --gate`


@dataclass
class Routing:
    """Kept slots sorted by expert (stable): ``token[s]`` goes to ``expert[s]`` and its
    output is scaled by ``weight[s]`` (differentiable); ``counts[e]`` slots per expert."""
    token: torch.Tensor
    expert: torch.Tensor
    weight: torch.Tensor
    counts: torch.Tensor


def group_limited_topk(scores: torch.Tensor, affinity: torch.Tensor, top_k: int,
                       router_groups: int, router_group_top_k: int) -> torch.Tensor:
    """[T, k] indices of each row's top-k ``scores`` among the experts of its best
    ``router_group_top_k`` groups by ``affinity`` (the module's rule); plain top-k without a
    limit."""
    if not _moecomm.limits_groups(router_groups, router_group_top_k):
        return torch.topk(scores, top_k, dim=-1).indices
    tokens, experts = scores.shape
    per_group = experts // router_groups
    grouped = affinity.detach().reshape(tokens, router_groups, per_group)
    group_score = torch.topk(grouped, min(2, per_group), dim=-1).values.sum(dim=-1)
    best = torch.sort(group_score, dim=-1, descending=True, stable=True).indices
    keep = torch.zeros_like(group_score, dtype=torch.bool)
    keep.scatter_(1, best[:, :router_group_top_k], True)
    masked = scores.masked_fill(~keep.repeat_interleave(per_group, dim=1), float("-inf"))
    return torch.topk(masked, top_k, dim=-1).indices


def check_groups(who: str, experts: int, top_k: int, gate: str, router_groups: object,
                 router_group_top_k: object) -> None:
    """The node-limited routing's shape, by the model file's rule (moecomm.Error naming the
    argument); the expert-choice gate has no per-token choice to limit."""
    groups = _args.integer(f"{who}: router_groups", router_groups)
    group_top_k = _args.integer(f"{who}: router_group_top_k", router_group_top_k)
    problem = _moecomm.router_groups_problem(experts, top_k, groups, group_top_k)
    if problem is not None:
        raise Error(f"{who}: {problem[0]}: {problem[1]}")
    if gate == "expert-choice" and _moecomm.limits_groups(groups, group_top_k):
        raise Error(f"{who}: router_group_top_k: the expert-choice gate lets experts choose "
                    f"tokens: it cannot limit a token to {group_top_k} groups (use gshard, "
                    f"sigmoid or xmoe)")


def choose(gate: str, x: torch.Tensor, weight: torch.Tensor, top_k: int,
           capacity_factor: Optional[float], experts: int,
           embeddings: Optional[torch.Tensor] = None, temperature: float = 0.07,
           router_groups: int = 1, router_group_top_k: int = 0):
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
    chosen = group_limited_topk(scores, probs, top_k, router_groups, router_group_top_k)
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
