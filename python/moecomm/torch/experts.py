"""What MoELayer and SampleMovingMoE share: the strategy argument, the initial weights and
the experts' compute (GPT FFN with biases, or SwiGLU), in torch.nn.Linear's layout."""
from __future__ import annotations

import math
from typing import Any, Dict, Optional, Sequence, Tuple, Union

import torch
import torch.nn.functional as F

from .. import Error, _args

FFN_TYPES = ("gelu", "swiglu")


def check_layer_args(who: str, sizes: Dict[str, Any], seed: Any,
                     capacity_factor: Any = None) -> None:
    """The plain arguments a layer passes to torch or to its model dict, checked for type
    (moecomm.Error naming the argument, not a TypeError from deep inside torch)."""
    for name, v in sizes.items():
        if _args.integer(f"{who}: {name}", v) < 1:
            raise Error(f"{who}: {name} must be a positive integer, got {v!r}")
    _args.integer(f"{who}: seed", seed, 64)
    _args.optional_number(f"{who}: capacity_factor", capacity_factor)


def strategy_text(strategy: Union[str, Any], who: str) -> str:
    """A strategy string (as `moecomm train --strategy`), or a PlanRow's ``.strategy``."""
    text = strategy if isinstance(strategy, str) else getattr(strategy, "strategy", None)
    if not isinstance(text, str):
        raise Error(f"{who}: strategy must be a string (as `moecomm train --strategy`) or "
                    f"an object with a .strategy string (a PlanRow), got {type(strategy).__name__}")
    return text


def refuse_step_knobs(strategy: str, who: str) -> None:
    """The knobs of a whole training step that a single layer cannot honour, refused by name
    (the strategy as built: sched::to_string's text). ZeRO shards the optimizer state,
    gradients and parameters over the data-parallel group (reduce-scatter and all-gather in
    place of GradSync's AllReduce), and overlap_microbatches runs one micro-batch's forward
    beside another's backward in a pipeline's 1F1B steady state: neither exists around one
    layer. pp_schedule orders a pipeline's stages, which one layer has none of: accepted."""
    knobs = dict(item.partition("=")[::2] for item in strategy.split(","))
    if knobs.get("zero", "0") != "0":
        raise Error(f"{who}: strategy: zero: ZeRO stage {knobs['zero']} shards optimizer "
                    f"state, gradients or parameters over the data-parallel group, which "
                    f"moecomm.torch does not run (GradSync AllReduces whole gradients); use "
                    f"zero=0")
    if knobs.get("overlap_microbatches", "false") != "false":
        raise Error(f"{who}: strategy: overlap_microbatches: overlapping one micro-batch's "
                    f"forward with another's backward needs a pipeline schedule, which "
                    f"moecomm.torch's single layer does not run; use overlap_microbatches=false "
                    f"(GradSync(micro_batches=M) accumulates micro-batches)")


def check_ffn_type(ffn_type: str, who: str) -> None:
    if ffn_type not in FFN_TYPES:
        raise Error(f"{who}: ffn_type must be gelu or swiglu, got '{ffn_type}'")


def expert_names(ffn_type: str) -> Tuple[str, ...]:
    """The experts' stacked parameters, in the order the layers keep them."""
    return ("w1", "b1", "w2", "b2") if ffn_type == "gelu" else ("w1", "w3", "w2")


def initial_weights(seed: int, hidden: int, ffn_hidden: int, experts: int, gate: str,
                    ffn_type: str, xmoe_dim: int
                    ) -> Tuple[torch.Tensor, Optional[torch.Tensor], Dict[str, torch.Tensor]]:
    """(gate weight, X-MoE's expert embeddings or None, every expert's weights stacked), drawn
    in one order from ``seed``: the same on every rank whatever the layout."""
    gen = torch.Generator().manual_seed(seed)
    h, f, e = hidden, ffn_hidden, experts
    rand = lambda *shape, fan: (torch.rand(*shape, generator=gen) * 2 - 1) / math.sqrt(fan)
    if gate == "xmoe":
        gate_weight, embeddings = rand(xmoe_dim, h, fan=h), rand(e, xmoe_dim, fan=xmoe_dim)
    else:
        gate_weight, embeddings = rand(e, h, fan=h), None
    full = {"w1": rand(e, f, h, fan=h), "w2": rand(e, h, f, fan=f)}
    if ffn_type == "gelu":
        full.update(b1=rand(e, f, fan=h), b2=rand(e, h, fan=f))
    else:
        full["w3"] = rand(e, f, h, fan=h)
    return gate_weight, embeddings, full


def set_param(module: torch.nn.Module, name: str, value: torch.Tensor) -> None:
    """``module.<name>`` takes ``value``: copied into the parameter if it exists (optimizers
    keep their references), else registered."""
    if hasattr(module, name):
        getattr(module, name).data.copy_(value)
    else:
        module.register_parameter(name, torch.nn.Parameter(value.clone().contiguous()))


def init_weights(module: torch.nn.Module, seed: int, xmoe_dim: int) -> None:
    """Sets a layer's ``gate_weight`` and ``expert_embeddings`` and loads its experts
    (``module.load_experts``) from :func:`initial_weights`."""
    gate, embeddings, full = initial_weights(seed, module.hidden, module.ffn_hidden,
                                             module.experts, module.gate, module.ffn_type,
                                             xmoe_dim)
    module.gate_weight = torch.nn.Parameter(gate)
    module.expert_embeddings = None if embeddings is None else torch.nn.Parameter(embeddings)
    module.load_experts(full)


def expert_rows(ffn_type: str, l: int, x: torch.Tensor, params: Sequence[torch.Tensor],
                output_bias: bool = True) -> torch.Tensor:
    """Local expert l on rows x. ``output_bias``: add gelu's b2 (one ESP shard of several
    adds it, as the shards' outputs are summed)."""
    if ffn_type == "gelu":
        w1, b1, w2, b2 = params
        y = F.gelu(x @ w1[l].t() + b1[l]) @ w2[l].t()
        return y + b2[l] if output_bias else y
    w1, w3, w2 = params
    return (F.silu(x @ w1[l].t()) * (x @ w3[l].t())) @ w2[l].t()


def one_expert(params: Sequence[torch.Tensor], l: int) -> list:
    """Expert l's own rows ``[l:l+1]`` of the stacked parameters, as fresh leaves (expert 0
    of their own stack): a backward differentiated against these makes one expert's gradient,
    not a zero-filled one of the whole stack's size per expert (quadratic in local experts)."""
    return [p[l:l + 1].detach().requires_grad_() for p in params]


def add_expert_grads(acc: Sequence[torch.Tensor], l: int,
                     got: Sequence[Optional[torch.Tensor]]) -> None:
    """Adds :func:`one_expert`'s gradients into the stacked ones, at expert l's rows."""
    for a, g in zip(acc, got):
        if g is not None:
            a.narrow(0, l, 1).add_(g)
