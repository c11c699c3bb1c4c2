"""moecomm.torch.MoELayer: an MoE layer whose forward and backward run moecomm's schedule
for a strategy, with torch tensors and torch.distributed (DESIGN.md "One schedule, three
executors")."""
from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional, Tuple, Union

import numpy as np
import torch
import torch.distributed as dist

from .. import Error, _moecomm
from . import routing as rt
from .dedup import dedup_steps
from .exchange_plan import ExchangeLayout, ExpertRows, PhasePlan, on_device
from .expert_compute import ExpertBank, SavedActivations
from .experts import (check_ffn_type, check_layer_args, expert_names, init_weights,
                      refuse_step_knobs, set_param, strategy_text)
from .fingerprint import check_built, layer_settings
from .groups import ScheduleGroups, Timeout, check_timeout
from .hybrid import DomainExperts, SharedResidual
from .runner import OpTimes, Runner
from .token_path import DedupTokenPath, Expert, TokenPath

R = _moecomm.OpRole
F = _moecomm.OpFamily
# The ops of the step the layer runs; the rest (attention, its TP AllReduce, the LM head)
# belong to the model around it, and gradient synchronization to moecomm.torch.GradSync.
TOKEN_OPS = frozenset((R.dispatch_a2a, R.dispatch_esp_allgather, R.dispatch_esp_allgather_copy,
                       R.expert, R.combine_esp_reducescatter, R.combine_esp_allreduce,
                       R.combine_a2a, R.combine_tp_allgather, R.combine_tp_allgather_copy,
                       R.hybrid_expert_allgather, R.hybrid_grad_reducescatter,
                       R.hybrid_shared_allreduce))
# The MoE layer's families (which of their ops each executor binds: sched/executor_caps.h).
MOE_FAMILIES = frozenset((F.token_path, F.placement, F.expert_transfer))


def default_cluster(world: int) -> Dict[str, Any]:
    """One node holding every rank: what a single machine's processes are by default."""
    return {"name": f"local-{world}",
            "levels": [{"name": "gpu", "count": world, "bandwidth_GBps": 10, "latency_us": 10}],
            "device": {"tflops": 1, "memory_GB": 16, "memory_bandwidth_GBps": 50}}


class MoELayer(torch.nn.Module):
    """A Mixture-of-Experts layer, data and expert parallel over torch.distributed's world.

    Each rank passes its own tokens ``x`` ([..., hidden]); TP members (``tp`` in
    ``parallel``) pass the same tokens, as tensor parallelism replicates activations. The
    layer returns sum over a token's kept slots of weight x expert(x), the same shape.

    Args:
        hidden, ffn_hidden, experts, top_k: the model's sizes.
        gate: ``gshard``, ``sigmoid``, ``xmoe`` or ``expert-choice`` (moecomm.torch.routing).
        capacity_factor: None for the dropless order, else each expert's per-rank capacity
            factor (expert choice: the average experts per token, default 1).
        router_groups, router_group_top_k: node-limited routing (the model file's keys): the
            experts split into ``router_groups`` equal contiguous groups, each token choosing
            its experts among its best ``router_group_top_k`` groups (0: every group;
            moecomm.torch.routing). Token-choice gates only.
        ffn_type: ``gelu`` (GPT FFN with biases) or ``swiglu`` (Mixtral, no biases).
        strategy: a method name or knobs, as ``moecomm train --strategy``
            (``"base=fsmoe,chunks_fwd=4"``), or a PlanRow.
        parallel: sizes as ``moecomm plan --parallel`` (``"ep=2,tp=2,esp=2"``); the world is
            torch.distributed's.
        cluster: preset, JSON file or dict the schedule is planned for (default: one node
            holding every rank). Its levels say which ranks share a node (1DH/2DH A2As).
        tokens: tokens per rank the schedule is sized for (the planner's chunk counts).
        seed: initialises the weights (the same on every rank for the replicated gate).
        timeout: how long a collective may wait for its peers before it fails (a
            datetime.timedelta or seconds, positive and finite), given to every process group
            the layer creates; default: the default group's (``init_process_group``'s).
    """

    def __init__(self, hidden: int, ffn_hidden: int, experts: int, top_k: int = 2, *,
                 gate: str = "gshard", capacity_factor: Optional[float] = None,
                 router_groups: int = 1, router_group_top_k: int = 0,
                 ffn_type: str = "gelu", strategy: Union[str, Any] = "baseline",
                 parallel: Union[str, Mapping[str, Any], None] = None,
                 cluster: Union[str, Mapping[str, Any], None] = None, tokens: int = 1024,
                 xmoe_dim: int = 8, temperature: float = 0.07, seed: int = 0,
                 timeout: Timeout = None) -> None:
        super().__init__()
        if not dist.is_initialized():
            raise Error("MoELayer: torch.distributed is not initialized (call "
                        "init_process_group first)")
        timeout = check_timeout(timeout, "MoELayer")
        rt.check_gate(gate)
        rt.check_temperature(temperature, "MoELayer")
        check_layer_args("MoELayer", {"hidden": hidden, "ffn_hidden": ffn_hidden,
                                      "experts": experts, "top_k": top_k, "tokens": tokens,
                                      "xmoe_dim": xmoe_dim}, seed, capacity_factor)
        check_ffn_type(ffn_type, "MoELayer")
        rt.check_groups("MoELayer", experts, top_k, gate, router_groups, router_group_top_k)
        self.hidden, self.ffn_hidden, self.experts, self.top_k = hidden, ffn_hidden, experts, top_k
        self.router_groups, self.router_group_top_k = router_groups, router_group_top_k
        self.gate, self.capacity_factor, self.ffn_type = gate, capacity_factor, ffn_type
        self.temperature = temperature
        world = dist.get_world_size()
        self.rank = dist.get_rank()
        model = {"name": "torch-moe", "hidden": hidden, "ffn_hidden": ffn_hidden,
                 "experts": experts, "top_k": top_k, "layers": 1, "heads": hidden,
                 "seq_len": tokens, "micro_batch": 1, "capacity_factor": capacity_factor,
                 "dtype_bytes": 4, "compute_dtype": "fp32", "ffn_type": ffn_type,
                 "router_groups": router_groups, "router_group_top_k": router_group_top_k}
        text = strategy_text(strategy, "MoELayer")
        # Every rank's settings agree before the first collective (or the groups' new_group).
        self.schedule = check_built("MoELayer", layer_settings(
            self, {"capacity_factor": capacity_factor, "router_groups": router_groups,
                   "router_group_top_k": router_group_top_k, "xmoe_dim": xmoe_dim, "seed": seed,
                   "timeout": timeout}), lambda: _moecomm.build_schedule(
                       model, cluster or default_cluster(world), parallel, text))
        if self.schedule.world_size != world:
            raise Error(f"MoELayer: the layout has {self.schedule.world_size} ranks but "
                        f"torch.distributed's world has {world}")
        self.strategy = self.schedule.strategy
        refuse_step_knobs(self.strategy, "MoELayer")
        self._bind_ops()
        self.groups = ScheduleGroups(self.schedule, self.ranks_per_node, timeout)
        init_weights(self, seed, xmoe_dim)
        self.last_times: Optional[OpTimes] = None
        self.network_gate = None  # Lina's A2A-first gate, set by a GradSync with micro-ops

    # --- setup
    def _bind_ops(self) -> None:
        self._by_id = {o.id: o for o in self.schedule.ops(self.rank)}
        ops = [o for o in self._by_id.values() if o.layer == 0]
        # The ops this layer cannot bind, from the table `moecomm train` consults too.
        refused = self.schedule.refusal("torch_layer", self.capacity_factor or 0.0,
                                        self.gate != "expert-choice")
        if refused is not None:
            raise Error(f"MoELayer: {refused[0]}: {refused[1]}")
        self.ops = {phase: [o for o in ops if o.phase == phase and o.role in TOKEN_OPS]
                    for phase in ("forward", "backward")}
        self.gate_ops = {o.phase: o for o in ops if o.role == R.gate}
        dispatch = next((o for o in ops if o.role == R.dispatch_a2a), None)
        if dispatch is None:
            raise Error("MoELayer: the layout has no expert-parallel A2A (ep must be > 1)")
        self.ep_group = list(self.schedule.collective(dispatch.collective).group)
        self.member = dispatch.member
        self.local = self.experts // len(self.ep_group)
        reduce = next((o for o in ops if o.role in (R.combine_esp_reducescatter,
                                                    R.combine_esp_allreduce)), None)
        self.esp = len(self.schedule.collective(reduce.collective).group) if reduce else 1
        self.shard = reduce.member if reduce else 0
        gather = next((o for o in ops if o.role == R.dispatch_esp_allgather), None)
        self.parts, self.part = (self.esp, self.shard) if gather else (1, 0)
        if self.ffn_hidden % self.esp:
            raise Error(f"MoELayer: ffn_hidden {self.ffn_hidden} does not split over esp = "
                        f"{self.esp}")
        self.chunks = {p: max([o.chunk + 1 for o in self.ops[p]] + [1]) for p in self.ops}
        self.ranks_per_node = self.schedule.ranks_per_node
        # a2a=dedup where its plan has node blocks (on one node it is the flat A2A): the
        # gate weights then apply at the experts and the combine sums per token.
        collective = self.schedule.collective(dispatch.collective)
        self.dedup = collective.algorithm == "dedup" and dedup_steps(
            tuple(int(r) for r in self.ep_group), self.ranks_per_node, self.member,
            "dispatch") is not None
        # Under dedup: by op id, the rows this rank sent each EP member per step of the
        # last forward and backward's dedup A2As (what crossed: unique rows).
        self.last_rows_sent: Dict[int, List[Dict[int, int]]] = {}
        # Whether the backward recomputes the experts' forward (a memory knob of the schedule).
        self.recompute_experts = self.schedule.recompute_experts
        self._bind_domains(ops)

    def _bind_domains(self, ops: List[Any]) -> None:
        """Which experts this rank owns and where a token for each expert goes. Without
        expert transfer, member m owns experts [m L, (m + 1) L) and gets their tokens. Under
        HybridEP the member at position p of the group's order owns [p L, (p + 1) L); domains
        are ``domain`` consecutive positions; a token for an expert of this rank's domain
        stays (its copy runs here), one for another domain goes to that domain's member at
        this rank's offset (Algorithm 1), which runs it with its copy: the runtime's rule,
        asked of moecomm's core once per layout."""
        _, order = self.schedule.ep_order(self.rank)
        self.order = list(order)
        self.position = self.order.index(self.member)
        self.domain = self.schedule.hybrid_domain
        self.exchange_local = self.domain * self.local  # experts a destination runs
        # Per expert domain, the EP member this rank's rows for its experts go to.
        self._destinations = torch.tensor(
            _moecomm.hybrid_destinations(len(self.order), self.domain, self.order, self.member),
            dtype=torch.int64)
        gather = next((o for o in ops if o.role == R.hybrid_expert_allgather), None)
        gathered = self.schedule.collective(gather.collective) if gather else None
        self.domain_group = gathered.group if gathered else None
        # How the experts travel: the AllGather's codec, as the HybridEP builder set it.
        self.expert_codec = gathered.codec if gathered else None
        self._codec: Optional[SharedResidual] = None

    def _exchange_keys(self, expert: torch.Tensor) -> torch.Tensor:
        """Each slot's destination j and expert there l' as j * domain L + l'."""
        span = self.domain * self.local
        owner_domain = expert // span
        if self._destinations.device != expert.device:
            self._destinations = self._destinations.to(expert.device)
        return self._destinations[owner_domain] * span + expert - owner_domain * span

    def load_experts(self, full: Mapping[str, torch.Tensor]) -> None:
        """Sets this rank's experts from every expert's weights, stacked over the experts in
        torch.nn.Linear's layout: ``w1`` [E, ffn, hidden] (and ``w3`` for swiglu), ``w2``
        [E, hidden, ffn], gelu's biases ``b1`` [E, ffn] and ``b2`` [E, hidden]. The rank
        keeps its local experts and its ESP shard of the ffn dimension."""
        first = self.position * self.local
        experts = slice(first, first + self.local)
        width = self.ffn_hidden // self.esp
        ffn = slice(self.shard * width, (self.shard + 1) * width)
        for name in expert_names(self.ffn_type):
            if name not in full:
                raise Error(f"MoELayer.load_experts: missing '{name}'")
            t = full[name].detach()[experts]
            t = t[:, :, ffn] if name == "w2" else (t if name == "b2" else t[:, ffn])
            set_param(self, name, t)

    def expert_params(self) -> List[torch.nn.Parameter]:
        return [getattr(self, n) for n in expert_names(self.ffn_type)]

    def dense_params(self) -> List[torch.nn.Parameter]:
        return [p for p in (self.gate_weight, self.expert_embeddings) if p is not None]

    # --- compute
    def _route(self, x: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(token, weight) of the kept slots sorted by exchange key (destination member j,
        local expert l there; slot order within), and this member's counts per key. Under a
        capacity, each expert's first C slots in slot order are kept (routing.order's rule),
        found by their place in the sorted order: no host sync, no data-dependent size."""
        token, expert, weight = rt.choose(self.gate, x, self.gate_weight, self.top_k,
                                          self.capacity_factor, self.experts,
                                          self.expert_embeddings, self.temperature,
                                          self.router_groups, self.router_group_top_k)
        cap = rt.capacity_of(self.gate, self.capacity_factor, x.shape[0], self.top_k,
                             self.experts)
        keys = self._exchange_keys(expert)
        dropped = len(self.ep_group) * self.exchange_local  # the key past every real one
        by_key = torch.sort(keys, stable=True).indices
        keys = keys[by_key]
        if cap is not None:  # the key is one-to-one with the expert
            per_key = _count(keys, dropped + 1)
            starts = torch.cumsum(per_key, 0) - per_key
            place = torch.arange(keys.numel(), device=keys.device) - starts[keys]
            keys = torch.where(place < cap, keys, torch.full_like(keys, dropped))
            kept = torch.sort(keys, stable=True).indices
            by_key, keys = by_key[kept], keys[kept]
        return token[by_key], weight[by_key], _count(keys, dropped + 1)[:dropped]

    def _layout(self, counts: torch.Tensor) -> ExchangeLayout:
        """Every EP member's counts, in one small AllGather within the gate op and one read on
        the host (the order's layout rides with the rows in moecomm's runtime)."""
        members = len(self.ep_group)
        everyone = counts.new_empty((members, counts.numel()))
        group = self.groups.get(self.ep_group)
        with Runner.reporting(self.gate_ops["forward"], group):  # a stalled or dead peer
            dist.all_gather(list(everyone.unbind(0)), counts, group=group)
        host = everyone.cpu().numpy()  # the token path's one host sync
        return ExchangeLayout(host.reshape(members, members, self.exchange_local), self.member,
                              self.parts, self.part)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[-1] != self.hidden:
            raise Error(f"MoELayer: input's last dimension is {x.shape[-1]}, hidden is "
                        f"{self.hidden}")
        times = OpTimes(x.device)
        rows = x.reshape(-1, self.hidden)
        start = times.now()
        token, weight, counts = self._route(rows)
        layout = self._layout(counts)
        order = layout.phase(self.chunks["forward"]).order
        order = on_device(order, rows.device)
        token, weight = token[order], weight[order]  # the forward's phase order
        if self.dedup:  # the dispatch copies token rows: no send rows to gather
            times.record(self.gate_ops["forward"].id, start, times.now())
            out = _DedupExchange.apply(self, layout, times, rows, token, weight,
                                       *self.expert_params())
            self.last_times = times
            return out.reshape(x.shape)
        send = rows.index_select(0, token)
        times.record(self.gate_ops["forward"].id, start, times.now())
        combined = _Exchange.apply(self, layout, times, send, *self.expert_params())
        out = rows.new_zeros(rows.shape).index_add(0, token, combined * weight[:, None])
        self.last_times = times
        return out.reshape(x.shape)

    def schedule_op(self, op_id: int) -> Any:
        """This rank's op ``op_id`` of the schedule (a ScheduleOp)."""
        return self._by_id[op_id]

    def _run(self, phase: str, plan: PhasePlan, rows: torch.Tensor, expert: Expert,
             times: OpTimes, kernels: Mapping[Any, Any],
             dedup: Optional[Tuple[torch.Tensor, Optional[torch.Tensor]]] = None) -> Any:
        """The phase's ops on ``rows`` (phase order); under ``dedup`` = (keys, scalars),
        ``rows`` is the token table and row r of the phase order copies token keys[r]
        (DedupTokenPath)."""
        chunk_sets = {tuple(range(plan.n)) if o.chunk < 0 else (o.chunk,)
                      for o in self.ops[phase] if o.role == R.expert}
        expert_rows = plan.expert_rows(sorted(chunk_sets), rows.device)
        if dedup is None:
            path = TokenPath(plan, rows, expert, expert_rows, self.groups, self.schedule)
        else:
            path = DedupTokenPath(plan, rows, dedup[0], dedup[1], expert, expert_rows,
                                  self.groups, self.schedule, self.last_rows_sent)
        Runner({**path.kernels(), **kernels}, times, self.network_gate).run(self.ops[phase])
        return path.finish()

    def _domain_experts(self) -> Optional[DomainExperts]:
        if self.domain_group is None:
            return None
        c = self.expert_codec
        if c.compression < 1 and self._codec is None:  # SR's state lives as long as the layer
            shapes = [p.shape[1:] for p in self.expert_params()]
            self._codec = SharedResidual(c.compression, c.shared_reference, c.error_feedback,
                                         self.experts, shapes, self.exchange_local)
        return DomainExperts(self.groups.get(self.domain_group), self.domain,
                             self.position % self.domain, self.local, self._codec)


def _count(keys: torch.Tensor, buckets: int) -> torch.Tensor:
    """Slots per key (bincount without its host sync on CUDA)."""
    return torch.zeros(buckets, dtype=torch.int64, device=keys.device).scatter_add_(
        0, keys, torch.ones_like(keys))


def _reorder(rows: torch.Tensor, index: Optional[np.ndarray]) -> torch.Tensor:
    if index is None:
        return rows
    return rows.index_select(0, on_device(index, rows.device))


class _Exchange(torch.autograd.Function):
    """Dispatch, experts and combine: the schedule's forward ops, and its backward ops in
    backward. The forward keeps the experts' activations by canonical row
    (expert_compute.SavedActivations), so the backward may chunk differently from the
    forward, as FSMoE's per-phase degree does; under ``recompute_experts`` it keeps only
    their inputs and the backward recomputes the rest."""

    @staticmethod
    def forward(ctx, layer: MoELayer, layout: ExchangeLayout, times: OpTimes,
                send: torch.Tensor, *params: torch.Tensor) -> torch.Tensor:
        domain = layer._domain_experts()
        weights = lambda: domain.copies if domain else params
        kernels = {R.hybrid_expert_allgather: lambda op: domain.gather(params)}
        recompute = layer.recompute_experts
        saved = SavedActivations(int(layout.counts[:, layout.me, :].sum()))

        def expert(rows: ExpertRows, x: torch.Tensor) -> torch.Tensor:
            bank = ExpertBank(layer.ffn_type, weights(), layer.shard == 0)
            y, keep = bank.forward(x, rows.batches, keep=not recompute)
            saved.add(rows.canonical, rows.batches, keep)
            return y

        with torch.no_grad():
            plan = layout.phase(layer.chunks["forward"])
            combined = layer._run("forward", plan, send.detach(), expert, times, kernels)
        ctx.layer, ctx.layout, ctx.times, ctx.domain = layer, layout, times, domain
        ctx.weights, ctx.saved = weights(), saved
        ctx.save_for_backward(*params)
        return combined

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        layer, lay, domain = ctx.layer, ctx.layout, ctx.domain
        params, weights = ctx.saved_tensors, ctx.weights
        grads = [torch.zeros_like(w) for w in weights]  # the copies' under HybridEP
        bank = ExpertBank(layer.ffn_type, weights, layer.shard == 0)
        nf, nb = layer.chunks["forward"], layer.chunks["backward"]

        def expert(rows: ExpertRows, dy: torch.Tensor) -> torch.Tensor:
            saved = ctx.saved.take(rows.canonical, rows.batches)
            if layer.recompute_experts:
                saved = bank.recompute(saved[0], rows.batches)
            return bank.backward(dy, rows.batches, saved, grads)

        ep = lambda op: layer.groups.get(layer.schedule.collective(op.collective).group)
        kernels = {R.hybrid_grad_reducescatter: lambda op: domain.return_grads(grads, params),
                   R.hybrid_shared_allreduce: lambda op: domain.share(params, ep(op))}
        with torch.no_grad():
            rows = _reorder(grad.contiguous(), lay.conversion(nf, nb))
            got = layer._run("backward", lay.phase(nb), rows, expert, ctx.times, kernels)
            grad_send = _reorder(got, lay.conversion(nb, nf))
        ctx.saved = None
        return (None, None, None, grad_send, *(domain.own_grads if domain else grads))


class _DedupExchange(torch.autograd.Function):
    """Dispatch, experts and combine under ``a2a=dedup`` (moecomm/torch/dedup.py): a token
    crosses once per destination member and node, so the gate weights apply at the experts
    and the combine sums per token. Forward: each expert row's output is w_row expert(x_row),
    summed per token by the combine (``table``: this rank's tokens, [T, hidden]; ``token``
    and ``weight``: its kept slots in the forward's phase order). Backward: the output
    gradient of each token is broadcast as the tokens were; an expert row takes
    d_out = w_row dy and dw_row = <expert(x_row), dy> (its output kept from the forward by
    canonical row), its input gradient is summed per token by the combine and dw comes back
    per row. (The strategy parser refuses a2a=dedup with expert_transfer=hybrid.)"""

    @staticmethod
    def forward(ctx, layer: MoELayer, layout: ExchangeLayout, times: OpTimes,
                table: torch.Tensor, token: torch.Tensor, weight: torch.Tensor,
                *params: torch.Tensor) -> torch.Tensor:
        recompute = layer.recompute_experts
        rows = int(layout.counts[:, layout.me, :].sum())
        saved = SavedActivations(rows)
        # expert(x) by canonical row, for dw (recomputed with the rest under recompute)
        outputs = None if recompute else table.new_empty((rows, layer.hidden))
        gates = table.new_empty(rows)  # the rows' weights, by canonical row

        def expert(er: ExpertRows, x: torch.Tensor, w: Optional[torch.Tensor]):
            bank = ExpertBank(layer.ffn_type, params, True)
            y, keep = bank.forward(x, er.batches, keep=not recompute)
            saved.add(er.canonical, er.batches, keep)
            at = on_device(er.canonical, y.device)
            if outputs is not None:
                outputs.index_copy_(0, at, er.batches.from_compute(y))
            gates.index_copy_(0, at, er.batches.from_compute(w))
            return y * w[:, None], None

        layer.last_rows_sent.clear()
        with torch.no_grad():
            plan = layout.phase(layer.chunks["forward"])
            out, _ = layer._run("forward", plan, table.detach(), expert, times, {},
                                (token, weight.detach()))
        ctx.layer, ctx.layout, ctx.times = layer, layout, times
        ctx.saved, ctx.token = saved, token
        ctx.outputs, ctx.gates = outputs, gates
        ctx.save_for_backward(*params)
        return out

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        layer, lay = ctx.layer, ctx.layout
        params = ctx.saved_tensors
        grads = [torch.zeros_like(w) for w in params]
        bank = ExpertBank(layer.ffn_type, params, True)
        nf, nb = layer.chunks["forward"], layer.chunks["backward"]

        def expert(er: ExpertRows, dy: torch.Tensor, _: Optional[torch.Tensor]):
            saved = ctx.saved.take(er.canonical, er.batches)
            at = on_device(er.canonical, dy.device)
            if layer.recompute_experts:
                y, saved = bank.forward(saved[0], er.batches, keep=True)
            else:
                y = er.batches.to_compute(ctx.outputs.index_select(0, at))
            w = er.batches.to_compute(ctx.gates.index_select(0, at))
            dw = (y * dy).sum(1)
            return bank.backward(dy * w[:, None], er.batches, saved, grads), dw

        with torch.no_grad():
            token = _reorder(ctx.token, lay.conversion(nf, nb))
            dtable, dw = layer._run("backward", lay.phase(nb), grad.contiguous(), expert,
                                    ctx.times, {}, (token, None))
            dweight = _reorder(dw, lay.conversion(nb, nf))
        ctx.saved = ctx.outputs = ctx.gates = None
        return (None, None, None, dtable, None, dweight, *grads)
