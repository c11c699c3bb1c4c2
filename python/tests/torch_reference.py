"""A plain single-process PyTorch MoE, written for the tests with no moecomm code: its own
gates, torch.nn.Linear experts, a token-by-token loop. moecomm.torch.MoELayer on 4 gloo
processes must give its outputs and gradients."""
from __future__ import annotations

import math
from typing import List, Optional

import torch
import torch.nn.functional as F


class Expert(torch.nn.Module):
    def __init__(self, hidden: int, ffn: int, ffn_type: str) -> None:
        super().__init__()
        self.ffn_type = ffn_type
        bias = ffn_type == "gelu"
        self.fc1 = torch.nn.Linear(hidden, ffn, bias=bias)
        self.fc2 = torch.nn.Linear(ffn, hidden, bias=bias)
        if ffn_type == "swiglu":
            self.fc3 = torch.nn.Linear(hidden, ffn, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.ffn_type == "gelu":
            return self.fc2(F.gelu(self.fc1(x)))
        return self.fc2(F.silu(self.fc1(x)) * self.fc3(x))


class ReferenceMoE(torch.nn.Module):
    def __init__(self, hidden: int, ffn: int, experts: int, top_k: int, gate: str,
                 capacity_factor: Optional[float], ffn_type: str, xmoe_dim: int = 8,
                 temperature: float = 0.07, seed: int = 0, router_groups: int = 1,
                 router_group_top_k: int = 0) -> None:
        super().__init__()
        torch.manual_seed(seed)
        self.experts_n, self.top_k, self.gate_kind = experts, top_k, gate
        self.groups, self.group_top_k = router_groups, router_group_top_k
        self.capacity_factor, self.temperature = capacity_factor, temperature
        width = xmoe_dim if gate == "xmoe" else experts
        self.router = torch.nn.Linear(hidden, width, bias=False)
        self.embeddings = torch.nn.Parameter(torch.randn(experts, xmoe_dim)) if gate == "xmoe" else None
        self.experts = torch.nn.ModuleList(Expert(hidden, ffn, ffn_type) for _ in range(experts))

    def node_limited(self, sc: torch.Tensor) -> torch.Tensor:
        """One token's scores with the experts outside its best router_group_top_k groups at
        -inf (DeepSeek-V3's node-limited routing): a group scores the sum of its two largest
        affinities (softmax, or sigmoid for the sigmoid gate), one expert's where it has one."""
        if not (self.groups > 1 and 0 < self.group_top_k < self.groups):
            return sc
        aff = (torch.sigmoid(sc) if self.gate_kind == "sigmoid" else torch.softmax(sc, -1)).tolist()
        per = self.experts_n // self.groups
        score = [sum(sorted(aff[g * per:(g + 1) * per], reverse=True)[:2])
                 for g in range(self.groups)]
        best = sorted(range(self.groups), key=lambda g: (-score[g], g))[:self.group_top_k]
        keep = torch.tensor([e // per in best for e in range(self.experts_n)])
        return sc.masked_fill(~keep, float("-inf"))

    def slots(self, x: torch.Tensor) -> List[tuple]:
        """(token, expert, weight) in slot order."""
        n, e = x.shape[0], self.experts_n
        if self.gate_kind == "expert-choice":
            s = torch.softmax(self.router(x), dim=-1)
            c = 1.0 if self.capacity_factor is None else self.capacity_factor
            cap = min(n, math.ceil(c * n / e))
            out = []
            for ex in range(e):
                top = torch.topk(s[:, ex], cap)
                out += [(int(t), ex, s[int(t), ex]) for t in top.indices]
            return out
        out = []
        for t in range(n):
            if self.gate_kind == "xmoe":
                z = self.router(x[t])
                sc = (z / z.norm().clamp_min(1e-12)) @ (
                    self.embeddings / self.embeddings.norm(dim=-1, keepdim=True).clamp_min(1e-12)).t()
                sc = sc / self.temperature
            else:
                sc = self.router(x[t])
            chosen = torch.topk(self.node_limited(sc), self.top_k).indices
            if self.gate_kind == "sigmoid":
                ws = [torch.sigmoid(sc[c]) for c in chosen]
            else:
                p = torch.softmax(sc, dim=-1)
                total = sum(p[c] for c in chosen) if self.top_k > 1 else 1.0
                ws = [p[c] / total for c in chosen]
            out += [(t, int(c), w) for c, w in zip(chosen, ws)]
        if self.capacity_factor is not None:
            cap = math.ceil(self.capacity_factor * n * self.top_k / e)
            seen = [0] * e
            kept = []
            for t, ex, w in out:
                if seen[ex] < cap:
                    kept.append((t, ex, w))
                seen[ex] += 1
            out = kept
        return out

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[0] == 0:  # an empty batch: no output rows, still a function of the gate
            return x * 0 + self.router(x).sum() * 0
        out = [torch.zeros(x.shape[1]) for _ in range(x.shape[0])]
        for t, ex, w in self.slots(x):
            out[t] = out[t] + w * self.experts[ex](x[t:t + 1])[0]
        return torch.stack(out)

    def stacked_experts(self) -> dict:
        """Every expert's weights stacked, as MoELayer.load_experts reads them."""
        get = lambda f: torch.stack([f(ex) for ex in self.experts])
        full = {"w1": get(lambda ex: ex.fc1.weight), "w2": get(lambda ex: ex.fc2.weight)}
        if self.experts[0].ffn_type == "gelu":
            full.update(b1=get(lambda ex: ex.fc1.bias), b2=get(lambda ex: ex.fc2.bias))
        else:
            full["w3"] = get(lambda ex: ex.fc3.weight)
        return full

    def stacked_grads(self) -> dict:
        """Every expert's gradients stacked (zero for an expert no token reached)."""
        full = {"w1": [], "w2": [], "b1": [], "b2": [], "w3": []}
        grad = lambda p: torch.zeros_like(p) if p.grad is None else p.grad
        for ex in self.experts:
            full["w1"].append(grad(ex.fc1.weight))
            full["w2"].append(grad(ex.fc2.weight))
            if ex.ffn_type == "gelu":
                full["b1"].append(grad(ex.fc1.bias))
                full["b2"].append(grad(ex.fc2.bias))
            else:
                full["w3"].append(grad(ex.fc3.weight))
        return {k: torch.stack(v) for k, v in full.items() if v}
