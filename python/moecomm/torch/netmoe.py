"""moecomm.torch.SampleMovingMoE: the MoE sublayer of a block under NetMoE's dynamic sample
placement (NetMoE Sec. 3, Algorithm 1), run as the schedule of ``placement=netmoe`` says,
with torch tensors and torch.distributed, the way moecomm's C++ runtime runs it
(nn/sample_moving_moe.h, rt/netmoe_binding.h):

  y = h + sum_k w_k E_k(LN2(h)),   computed so that y lands on the samples' NEW ranks.

Ops of the schedule and their kernels (bound by label name; no knob has code here):

  gate                          LN2, the gate and the order, at the rank holding the samples;
                                the per-sample expert counts (NetMoE Eq. 2)
  moe.netmoe.counts_allgather   the EP group's sample ids and per-sample counts (line 9):
                                every member learns every sender's rows per expert (the
                                scatter's layout) and the placement problem
  moe.netmoe.solve              the two-stage placement on moecomm's C++ solver, on its own
                                thread without the GIL (moecomm.place.AsyncSamplePlacer),
                                while the scatter and the experts run; every member solves
                                the same deterministic problem, so no broadcast is needed
  moe.netmoe.aux_allgather      each member's slots per expert, summed by the samples' home
                                ranks (what the baseline's load-balancing loss is computed
                                from, per home); the layers here have no aux loss, so the sums
                                are what the op delivers: ``home_expert_load``
  moe.netmoe.targets_allgather  (schedules with the LM head: ``vocab_size``) the group's
                                targets, so the samples' targets follow them
  moe.dispatch.a2a              forward: the scatter (line 10) of h itself, not LN2(h), with
                                metadata columns (global token, first slot, weight), chunk by
                                chunk; backward: dy from the new ranks to the experts
  moe.expert                    LN2, the expert, the weight, and the residual on each token's
                                first slot (lines 11-12); backward: the chunk's gradients
  moe.combine.a2a               forward: the gather (lines 13-14), each row straight to its
                                sample's new rank, tagged with its place there and its
                                backward chunk; backward: dh and each slot's weight gradient
                                back to the rank that ran the gate

Chunks (chunks_fwd, chunks_bwd) cut every (source, local expert) block of the scatter into
contiguous pieces (token_path.piece, the C++ exchange_chunks.h), so chunking changes when
rows travel, never what is computed; the backward chunks by its own degree.

Samples are whole sequences with a global id within the EP group (home member * B + b); on
each rank the samples it holds after the layer sit in ascending global id.
"""
from __future__ import annotations

from typing import Any, Dict, List, Mapping, NamedTuple, Optional, Sequence, Tuple, Union

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F

from .. import Error, _args, _moecomm
from .. import place as _place
from . import collectives as col
from . import routing as rt
from .collectives import Pending
from .experts import (add_expert_grads, check_ffn_type, check_layer_args, expert_names,
                      expert_rows, init_weights, one_expert, refuse_step_knobs, set_param,
                      strategy_text)
from .fingerprint import check_built, layer_settings
from .groups import ScheduleGroups, Timeout, check_timeout, nodes_of
from .layer import MOE_FAMILIES, default_cluster
from .runner import OpTimes, Runner
from .token_path import Layout, piece

NAME = "SampleMovingMoE"
R = _moecomm.OpRole
FORWARD_OPS = frozenset((R.netmoe_counts_allgather, R.netmoe_aux_allgather, R.netmoe_solve,
                         R.netmoe_targets_allgather, R.dispatch_a2a, R.expert, R.combine_a2a))
BACKWARD_OPS = frozenset((R.dispatch_a2a, R.expert, R.combine_a2a))
# Metadata columns riding with the scatter's rows (fp32 bits): global token, first slot,
# weight; and with the gather's: the row's place at the new rank times chunks_bwd plus its
# backward chunk.
SCATTER_META, GATHER_META = 3, 1


class SampleMovingOutput(NamedTuple):
    """What :class:`SampleMovingMoE` returns: the block output of the samples now on this rank
    ([B, S, hidden]), their global ids ([B], ascending) and, when targets were given, their
    targets ([B, S])."""
    y: torch.Tensor
    sample_ids: torch.Tensor
    targets: Optional[torch.Tensor]


def _bits(t: torch.Tensor) -> torch.Tensor:
    """int32 values as fp32 columns, bit for bit (they ride with the rows in one A2A)."""
    return t.to(torch.int32).view(torch.float32)


def _ints(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view(torch.int32).to(torch.int64)


class SampleMovingMoE(torch.nn.Module):
    """The MoE sublayer y = h + MoE(LN2(h)) whose samples move to where NetMoE's placement
    puts them (``placement=netmoe``), expert and data parallel over torch.distributed.

    Args:
        hidden, ffn_hidden, experts, top_k: the model's sizes.
        gate: ``gshard``, ``sigmoid`` or ``xmoe`` (token choice: every slot is kept, so each
            token's residual rides on its first slot exactly once).
        ffn_type: ``gelu`` (GPT FFN with biases) or ``swiglu``.
        strategy: knobs with ``placement=netmoe`` (``"netmoe"``,
            ``"base=netmoe,chunks=2"``), as ``moecomm train --strategy``, or a PlanRow.
        parallel: sizes as ``moecomm plan --parallel`` (tp = 1); samples move within EP groups.
        cluster: preset, JSON file or dict: which ranks share a node (the placement's two
            stages) and what the schedule is priced on (default: one node of every rank).
        samples, seq_len: samples per rank and tokens per sample the schedule is sized for
            (the executor moves its data's real sizes).
        vocab_size: the model's vocabulary: the step's schedule then has the LM head and the
            targets' AllGather, and forward moves ``targets`` with the samples.
        solver: the placement's assignment solver (``moecomm.place.solvers()``).
        seed: initialises the weights (the same on every rank for the replicated gate).
        timeout: how long a collective may wait for its peers before it fails (a
            datetime.timedelta or seconds, positive and finite), given to every process group
            the layer creates; default: the default group's (``init_process_group``'s).

    Attributes: ``strategy``, ``schedule``, ``ep_group``, ``member``, ``local``, ``grid``
    (nodes x members per node of the EP group), ``ln2``, ``moves_targets`` (built with
    vocab_size), ``last_times``, ``last_counts`` (the group's per-sample counts the last
    placement solved, [P B, E]), ``last_placement`` (its moecomm.place.Placement),
    ``home_expert_load`` ([P, E]: slots per expert of each home rank's samples, wherever they
    sat: what the aux AllGather delivers).
    """

    def __init__(self, hidden: int, ffn_hidden: int, experts: int, top_k: int = 2, *,
                 gate: str = "gshard", ffn_type: str = "gelu",
                 strategy: Union[str, Any] = "netmoe",
                 parallel: Union[str, Mapping[str, Any], None] = None,
                 cluster: Union[str, Mapping[str, Any], None] = None, samples: int = 4,
                 seq_len: int = 256, vocab_size: Optional[int] = None, solver: str = "flow",
                 xmoe_dim: int = 8, temperature: float = 0.07, eps: float = 1e-5,
                 seed: int = 0, timeout: Timeout = None) -> None:
        super().__init__()
        if not dist.is_initialized():
            raise Error(f"{NAME}: torch.distributed is not initialized (call "
                        f"init_process_group first)")
        timeout = check_timeout(timeout, NAME)
        rt.check_gate(gate)
        rt.check_temperature(temperature, NAME)
        check_layer_args(NAME, {"hidden": hidden, "ffn_hidden": ffn_hidden, "experts": experts,
                                "top_k": top_k, "xmoe_dim": xmoe_dim}, seed)
        if not _args.number(f"{NAME}: eps", eps) > 0:
            raise Error(f"{NAME}: eps must be > 0, got {eps!r}")
        check_ffn_type(ffn_type, NAME)
        for what, v in (("samples", samples), ("seq_len", seq_len)):
            if not isinstance(v, int) or v < 1:
                raise Error(f"{NAME}: {what} must be a positive integer, got {v!r}")
        self.hidden, self.ffn_hidden, self.experts, self.top_k = hidden, ffn_hidden, experts, top_k
        self.gate, self.ffn_type, self.temperature = gate, ffn_type, temperature
        world = dist.get_world_size()
        self.rank = dist.get_rank()
        model = {"name": "torch-netmoe", "hidden": hidden, "ffn_hidden": ffn_hidden,
                 "experts": experts, "top_k": top_k, "layers": 1, "heads": hidden,
                 "seq_len": seq_len, "micro_batch": samples, "capacity_factor": None,
                 "dtype_bytes": 4, "compute_dtype": "fp32", "ffn_type": ffn_type}
        if vocab_size is not None:
            model["vocab_size"] = vocab_size
        text = strategy_text(strategy, NAME)
        # Every rank's settings agree before the first collective (or the groups' new_group).
        self.schedule = check_built(NAME, layer_settings(
            self, {"vocab_size": vocab_size, "solver": solver, "xmoe_dim": xmoe_dim,
                   "eps": eps, "seed": seed, "timeout": timeout}), lambda: _moecomm.build_schedule(
                       model, cluster or default_cluster(world), parallel, text,
                       routing="auto", lm_head=vocab_size is not None))
        if self.schedule.world_size != world:
            raise Error(f"{NAME}: the layout has {self.schedule.world_size} ranks but "
                        f"torch.distributed's world has {world}")
        self.strategy = self.schedule.strategy
        refuse_step_knobs(self.strategy, NAME)
        # One table with `moecomm train`: the semantic rules (tp, gate), then the ops this
        # layer cannot bind (sched/executor_caps.h).
        refused = self.schedule.refusal("torch_sample_moving", 0.0, gate != "expert-choice")
        if refused is not None:
            raise Error(f"{NAME}: {refused[0]}: {refused[1]}")
        self._bind_ops()
        self.groups = ScheduleGroups(self.schedule, self.ranks_per_node, timeout)
        self.placer = _place.AsyncSamplePlacer(_expert_blocks(experts, self.members),
                                               self.grid[1], devices=self.members, solver=solver)
        self.ln2 = torch.nn.LayerNorm(hidden, eps=eps)
        init_weights(self, seed, xmoe_dim)
        self.last_times: Optional[OpTimes] = None
        self.last_counts: Optional[np.ndarray] = None
        self.last_placement: Optional[Any] = None
        self.home_expert_load: Optional[torch.Tensor] = None

    # --- setup
    def _bind_ops(self) -> None:
        self._by_id = {o.id: o for o in self.schedule.ops(self.rank)}
        ops = [o for o in self._by_id.values() if o.role.family in MOE_FAMILIES]
        self.ops = {"forward": [o for o in ops if o.phase == "forward" and o.role in FORWARD_OPS],
                    "backward": [o for o in ops if o.phase == "backward"
                                 and o.role in BACKWARD_OPS]}
        self.gate_ops = {o.phase: o for o in self._by_id.values()
                         if o.role == R.gate and o.layer == 0}
        self.moves_targets = any(o.role == R.netmoe_targets_allgather
                                 for o in self.ops["forward"])
        dispatch = next((o for o in ops if o.role == R.dispatch_a2a), None)
        if dispatch is None:
            raise Error(f"{NAME}: the layout has no expert-parallel A2A (ep must be > 1): "
                        f"samples move within EP groups")
        self.ep_group = list(self.schedule.collective(dispatch.collective).group)
        self.member = dispatch.member
        self.members = len(self.ep_group)
        if self.experts % self.members:
            raise Error(f"{NAME}: ep = {self.members} does not divide the number of experts "
                        f"({self.experts})")
        self.local = self.experts // self.members
        self.chunks = {p: max([o.chunk + 1 for o in self.ops[p] if o.role == R.dispatch_a2a]
                              + [1]) for p in self.ops}
        self.ranks_per_node = self.schedule.ranks_per_node
        nodes = nodes_of(self.ep_group, self.ranks_per_node)
        if not nodes or [m for n in nodes for m in n] != list(range(self.members)):
            raise Error(f"{NAME}: placement=netmoe needs the EP group {self.ep_group} node-major "
                        f"with the same number of members on every node ({self.ranks_per_node} "
                        f"ranks per node)")
        self.grid = (len(nodes), len(nodes[0]))  # nodes x members per node: the placer's grid

    def load_experts(self, full: Mapping[str, torch.Tensor]) -> None:
        """Sets this rank's experts from every expert's weights stacked in torch.nn.Linear's
        layout (as MoELayer.load_experts): ``w1`` [E, ffn, hidden] (and ``w3`` for swiglu),
        ``w2`` [E, hidden, ffn], gelu's ``b1`` [E, ffn] and ``b2`` [E, hidden]."""
        first = self.member * self.local
        for name in expert_names(self.ffn_type):
            if name not in full:
                raise Error(f"{NAME}.load_experts: missing '{name}'")
            set_param(self, name, full[name].detach()[first:first + self.local])

    def expert_params(self) -> List[torch.nn.Parameter]:
        return [getattr(self, n) for n in expert_names(self.ffn_type)]

    def dense_params(self) -> List[torch.nn.Parameter]:
        """The replicated parameters (GradSync sums them over the data-parallel group): the
        gate and LN2, whose gradients come from the gate's side and the experts' side."""
        gate = [p for p in (self.gate_weight, self.expert_embeddings) if p is not None]
        return gate + [self.ln2.weight, self.ln2.bias]

    def schedule_op(self, op_id: int) -> Any:
        """This rank's op ``op_id`` of the schedule (a ScheduleOp)."""
        return self._by_id[op_id]

    # --- compute
    def _check(self, h: torch.Tensor, sample_ids: Optional[torch.Tensor],
               targets: Optional[torch.Tensor]) -> torch.Tensor:
        if not isinstance(h, torch.Tensor) or h.dim() != 3:
            raise Error(f"{NAME}: h must be this rank's samples [B, S, hidden], got "
                        f"{tuple(h.shape) if isinstance(h, torch.Tensor) else type(h).__name__}")
        if h.shape[-1] != self.hidden:
            raise Error(f"{NAME}: h's last dimension is {h.shape[-1]}, hidden is {self.hidden}")
        if h.dtype != torch.float32:
            raise Error(f"{NAME}: h must be float32 (the rows' metadata ride as fp32 columns), "
                        f"got {h.dtype}")
        b, s = h.shape[0], h.shape[1]
        if b < 1 or s < 1:
            raise Error(f"{NAME}: h has no tokens (shape {tuple(h.shape)})")
        if sample_ids is None:
            ids = torch.arange(b, dtype=torch.int64, device=h.device) + self.member * b
        else:
            ids = torch.as_tensor(sample_ids)
            if ids.shape != (b,) or ids.dtype not in (torch.int32, torch.int64):
                raise Error(f"{NAME}: sample_ids must be [B] = [{b}] integers, got "
                            f"{tuple(ids.shape)} {ids.dtype}")
            ids = ids.to(device=h.device, dtype=torch.int64)
        if targets is not None and not self.moves_targets:
            raise Error(f"{NAME}: targets move with the samples when the layer is built with "
                        f"vocab_size (the schedule's LM head and targets AllGather)")
        if targets is None and self.moves_targets:
            raise Error(f"{NAME}: the layer was built with vocab_size: pass this rank's home "
                        f"samples' targets [B, S]")
        if targets is not None and (targets.shape != (b, s) or targets.dtype not in
                                    (torch.int32, torch.int64)):
            raise Error(f"{NAME}: targets must be [B, S] = [{b}, {s}] integers, got "
                        f"{tuple(targets.shape)} {targets.dtype}")
        return ids

    def forward(self, h: torch.Tensor, sample_ids: Optional[torch.Tensor] = None,
                targets: Optional[torch.Tensor] = None) -> SampleMovingOutput:
        """h: the samples this rank holds [B, S, hidden] (every EP member the same B and S);
        sample_ids: their global ids [B] (default: this member's own, member * B + b; a
        previous layer's output ids otherwise); targets: this rank's HOME samples' targets
        [B, S] (member * B + b), when built with vocab_size (the layer before the head).
        Returns y = h + MoE(LN2(h)) of the samples placed here, their ids and, with targets,
        theirs, all on h's device (sample_ids and targets given elsewhere are copied there;
        the layer's parameters must be on it, as with any torch module)."""
        ids = self._check(h, sample_ids, targets)
        b, s, m = h.shape
        times = OpTimes(h.device)
        start = times.now()
        rows = h.reshape(b * s, m)
        a = F.layer_norm(rows, (m,), self.ln2.weight, self.ln2.bias, self.ln2.eps)
        token, expert, weight = rt.choose(self.gate, a, self.gate_weight, self.top_k, None,
                                          self.experts, self.expert_embeddings, self.temperature)
        routing = rt.order(token, expert, weight, self.experts, None)
        if targets is not None:
            targets = targets.to(h.device)
        step = _Step(self, ids, s, routing, targets)
        if "forward" in self.gate_ops:
            times.record(self.gate_ops["forward"].id, start, times.now())
        y = _SampleExchange.apply(self, step, times, rows[routing.token], routing.weight,
                                  self.ln2.weight, self.ln2.bias, *self.expert_params())
        self.last_times = times
        return SampleMovingOutput(y.reshape(b, s, m), step.new_ids, step.new_targets)

    # --- collectives
    def _a2a(self, op: object, payload: torch.Tensor, matrix: Sequence[Sequence[int]]
             ) -> Pending:
        """The op's A2A-v, ``matrix[i][j]`` rows from member i to member j."""
        return col.a2a_by_algorithm(payload, matrix, self.member,
                                    self.schedule.collective(op.collective), self.groups)


def _expert_blocks(experts: int, members: int) -> List[int]:
    """Experts in contiguous blocks over the members (place::expert_blocks)."""
    return [e * members // experts for e in range(experts)]


def _to(t: torch.Tensor, device: torch.device) -> torch.Tensor:
    """A host tensor of the layout's bookkeeping onto the rows' device. non_blocking: from
    pageable memory the driver stages the copy at once, so it does not wait for the device
    stream (a blocking copy would)."""
    return t.to(device, non_blocking=True)


class _Step:
    """One forward and backward of the layer: what the kernels share.

    Two kinds of tensors: the rows and what indexes them (token ids, places, tags) live on
    the input's device; what the schedule's sizes come from (the gathered counts, the
    placement, each block's rows) lives on the host, read back once per step, since the
    A2As' split sizes and the placement solver need them there."""

    def __init__(self, layer: SampleMovingMoE, ids: torch.Tensor, seq_len: int,
                 routing: rt.Routing, targets: Optional[torch.Tensor]) -> None:
        self.layer = layer
        self.P, self.L, self.E = layer.members, layer.local, layer.experts
        self.me = layer.member
        self.ids, self.S, self.B = ids, seq_len, ids.shape[0]
        self.device = ids.device
        self.targets = targets
        self.nf, self.nb = layer.chunks["forward"], layer.chunks["backward"]
        tok = routing.token
        # Per send row (expert-major, token order within): its global token, whether it is
        # its token's first slot (the residual rides there), and its expert.
        self.row_token = ids[tok // seq_len] * seq_len + tok % seq_len
        by_token = torch.sort(tok, stable=True)  # a token's rows in send order
        starts = torch.ones_like(tok, dtype=torch.bool)
        starts[1:] = by_token.values[1:] != by_token.values[:-1]
        self.row_first = torch.zeros_like(tok)
        self.row_first[by_token.indices] = starts.to(tok.dtype)  # a permutation: no mask
        self.row_expert = routing.expert
        # NetMoE Eq. 2: slots per (sample held, expert).
        self.sample_counts = torch.zeros(self.B, self.E, dtype=torch.int64, device=self.device)
        self.sample_counts.index_put_((tok // seq_len, routing.expert),
                                      torch.ones_like(tok), accumulate=True)
        self.new_ids = self.new_targets = None
        self.submitted = self.collected = False

    # --- forward kernels
    def forward_kernels(self) -> Dict[str, Any]:
        return {R.netmoe_counts_allgather: self.counts_allgather,
                R.netmoe_aux_allgather: self.aux_allgather,
                R.netmoe_solve: self.solve,
                R.netmoe_targets_allgather: self.targets_allgather,
                R.dispatch_a2a: self.scatter,
                R.expert: self.experts,
                R.combine_a2a: self.gather}

    def backward_kernels(self) -> Dict[str, Any]:
        return {R.dispatch_a2a: self.dy_exchange,
                R.expert: self.experts_backward,
                R.combine_a2a: self.dh_exchange}

    def begin_forward(self, send: torch.Tensor, weight: torch.Tensor,
                      params: Sequence[torch.Tensor]) -> None:
        self.params = params  # ln2 weight, ln2 bias, then the experts'
        self.send = send
        self.payload = torch.cat([send, _bits(self.row_token)[:, None],
                                  _bits(self.row_first)[:, None], weight[:, None]], dim=1)
        self.recv: List[Dict[Tuple[int, int], torch.Tensor]] = [dict() for _ in range(self.nf)]
        self.z: List[Optional[Dict[Tuple[int, int], torch.Tensor]]] = [None] * self.nf
        self.y = send.new_zeros((self.B * self.S, send.shape[1]))
        # Per gather chunk: rows received from each member (host) and each arrival's tag.
        self.got: List[Tuple[List[int], torch.Tensor]] = []
        # Per row sent: (destination, [block, row], backward chunk).
        self.sent: List[Tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = []

    def _group(self, op: object):
        return self.layer.groups.get(self.layer.schedule.collective(op.collective).group)

    def counts_allgather(self, op: object) -> Pending:
        """Line 9: every member's B, S, sample ids and per-sample counts."""
        group = self._group(op)
        # On the rows' device: NCCL takes device tensors only.
        shape = torch.tensor([self.B, self.S], dtype=torch.int64, device=self.device)
        shapes = [torch.empty_like(shape) for _ in range(self.P)]
        dist.all_gather(shapes, shape, group=group)
        every = torch.stack(shapes).tolist()  # one read back
        if any(t != [self.B, self.S] for t in every):
            raise Error(f"{NAME}: every EP member must hold the same number of samples and "
                        f"tokens per sample, got [B, S] = {', '.join(str(t) for t in every)}")
        block = torch.cat([self.ids, self.sample_counts.reshape(-1)])
        pending = col.all_gather_v(block, [block.shape[0]] * self.P, group)

        def unpack() -> torch.Tensor:
            got = pending.wait()
            # The group's ids and counts, read back once: the split sizes, the rows' samples
            # and the placement problem are host bookkeeping (the solver runs there).
            host = got.cpu().reshape(self.P, -1)
            all_ids = host[:, :self.B]
            all_counts = host[:, self.B:].reshape(self.P, self.B, self.E)
            total = self.P * self.B
            seen = torch.bincount(all_ids.reshape(-1).clamp(0, total), minlength=total + 1)
            if (seen[:total] != 1).any():
                bad = int(torch.nonzero(seen[:total] != 1)[0])
                raise Error(f"{NAME}: the EP group's sample ids must be 0..{total - 1}, each "
                            f"once (member * B + b at home); id {bad} is held "
                            f"{int(seen[bad])} times")
            per = all_counts.sum(1)  # [i][e]: rows member i sends expert e
            self.lay = Layout(per.reshape(self.P, self.P, self.L).tolist(), self.me, 1, 0)
            self.offsets = (torch.cumsum(per, 1) - per).tolist()  # [i][e]: its first send row
            num = torch.zeros(total, self.E, dtype=torch.int64)
            num[all_ids.reshape(-1)] = all_counts.reshape(total, self.E)
            self.num = num
            # Each sender's send rows' samples (expert-major, its samples in order within),
            # from which every member knows where every row goes once placed.
            self.row_sample = [torch.repeat_interleave(all_ids[i].repeat(self.E),
                                                       all_counts[i].t().reshape(-1))
                               for i in range(self.P)]
            return got

        return Pending(pending, unpack)

    def aux_allgather(self, op: object) -> Pending:
        """Slots per expert summed by home rank over the tokens held, all-gathered and summed:
        every member learns each home's expert load wherever its samples sat."""
        rows_by_sample = self.row_token // self.S  # global sample of each send row
        mine = torch.zeros(self.P, self.E, dtype=torch.int64, device=self.device)
        mine.index_put_((rows_by_sample // self.B, self.row_expert),
                        torch.ones_like(rows_by_sample), accumulate=True)
        pending = col.all_gather_v(mine.reshape(-1), [self.P * self.E] * self.P,
                                   self._group(op))

        def unpack() -> torch.Tensor:
            got = pending.wait()
            self.layer.home_expert_load = got.reshape(self.P, self.P, self.E).sum(0)
            return got

        return Pending(pending, unpack)

    def solve(self, op: object) -> Pending:
        """Lines 9 and 13: the placement starts solving now (a C++ thread, no GIL) and is
        collected when the gather needs it."""
        self.layer.placer.submit(self.num.numpy())
        self.submitted = True

        def collect() -> torch.Tensor:
            self.collected = True
            placed = self.layer.placer.collect()
            self._set_placement(torch.as_tensor(np.asarray(placed.sample_device),
                                                dtype=torch.int64))
            self.layer.last_counts = self.num.numpy().copy()
            self.layer.last_placement = placed
            return self.place

        return Pending(None, collect)

    def abandon(self) -> None:
        if self.submitted and not self.collected:
            self.collected = True
            try:
                self.layer.placer.collect()
            except Error:
                pass  # the step failed already; its error is the one to report

    def _set_placement(self, place: torch.Tensor) -> None:
        """The solver's placement (host): kept there for the sizes (``place_host``), and with
        each sample's place at its new rank and this rank's new samples copied to the
        device in one transfer."""
        per = torch.bincount(place, minlength=self.P)
        if place.shape[0] != self.P * self.B or (per != self.B).any():
            raise Error(f"{NAME}: the placement does not keep {self.B} samples per member "
                        f"(got {per.tolist()})")
        self.place_host = place
        new_ids = torch.nonzero(place == self.me).reshape(-1)  # ascending global id
        slot = torch.zeros_like(place)
        for d in range(self.P):
            mine = torch.nonzero(place == d).reshape(-1)
            slot[mine] = torch.arange(mine.shape[0])
        moved = _to(torch.cat([place, slot, new_ids]), self.device)
        self.place, self.slot, self.new_ids = torch.split(moved, [place.shape[0]] * 2 + [self.B])
        if self.targets is not None and hasattr(self, "all_targets"):
            self.new_targets = self.all_targets[self.new_ids]

    def targets_allgather(self, op: object) -> Pending:
        """The group's targets (each member's home samples', member-major: by global id), so
        that each sample's targets reach the rank it ends on (as moecomm train's step)."""
        pending = col.all_gather_v(self.targets.to(torch.int64), [self.B] * self.P,
                                   self._group(op))

        def unpack() -> torch.Tensor:
            self.all_targets = pending.wait()
            if hasattr(self, "place"):
                self.new_targets = self.all_targets[self.new_ids]
            return self.all_targets

        return Pending(pending, unpack)

    def scatter(self, op: object) -> Pending:
        """Line 10, chunk c: h and its metadata to the experts' members."""
        lay, c, n = self.lay, max(op.chunk, 0), self.nf
        parts = [self.payload[slice(*lay.send_rows(j, l, c, n, 0))]
                 for j in range(self.P) for l in range(self.L)]
        matrix = [[sum(lay.size(i, j, l, c, n, 0) for l in range(self.L)) for j in range(self.P)]
                  for i in range(self.P)]
        pending = self.layer._a2a(op, torch.cat(parts), matrix)

        def unpack() -> torch.Tensor:
            got = pending.wait()
            keys = [(i, l) for i in range(self.P) for l in range(self.L)]
            sizes = [lay.size(i, self.me, l, c, n, 0) for i, l in keys]
            self.recv[c].update(zip(keys, torch.split(got, sizes)))
            return got

        return Pending(pending, unpack)

    def _apply(self, l: int, rows: torch.Tensor, params: Sequence[torch.Tensor]) -> torch.Tensor:
        """Lines 11-12 on rows (h and metadata) of local expert l: w E(LN2(h)) + [first] h."""
        m = self.layer.hidden
        h, first, w = rows[:, :m], _ints(rows[:, m + 1:m + 2]).reshape(-1), rows[:, m + 2]
        ln_w, ln_b, *experts = params
        a = F.layer_norm(h, (m,), ln_w, ln_b, self.layer.ln2.eps)
        return (w[:, None] * expert_rows(self.layer.ffn_type, l, a, experts)
                + first[:, None] * h)

    def experts(self, op: object) -> None:
        """Each local expert on the chunk's rows from every source at once."""
        for c in (range(self.nf) if op.chunk < 0 else [op.chunk]):
            self.z[c] = {}
            for l in range(self.L):
                keys = [(i, l) for i in range(self.P)]
                z = self._apply(l, torch.cat([self.recv[c][k] for k in keys]), self.params)
                self.z[c].update(zip(keys, torch.split(z, [self.recv[c][k].shape[0]
                                                          for k in keys])))

    def _moved(self, src: int, q: int, c: int, n: int, dest_of) -> torch.Tensor:
        """Per destination, rows of expert-side member q's chunk c of n that came from
        member src (every member knows them from the gathered counts and the placement;
        host tensors: they are split sizes)."""
        out = torch.zeros(self.P, dtype=torch.int64)
        samples = self.row_sample[src]
        for l in range(self.L):
            at = self.offsets[src][q * self.L + l]
            lo, hi = piece(self.lay.counts[src][q][l], c, n, 0, 1)
            out += torch.bincount(dest_of[samples[at + lo:at + hi]], minlength=self.P)
        return out

    def gather(self, op: object) -> Pending:
        """Lines 13-14, chunk c: each output row straight to its sample's new rank, tagged with
        its place there and its backward chunk."""
        c, n, nb, S = max(op.chunk, 0), self.nf, self.nb, self.S
        keys = [(i, l) for i in range(self.P) for l in range(self.L)]
        z = torch.cat([self.z[c][k] for k in keys])
        token = torch.cat([_ints(self.recv[c][k][:, self.layer.hidden:self.layer.hidden + 1])
                           for k in keys]).reshape(-1)
        # Each row's (source, expert) block and place there, hence its backward chunk: known
        # from the layout on the host, copied to the device in one transfer.
        rows = torch.cat([self._block_rows(i, l, c) for i, l in keys])
        rows = _to(torch.cat([rows, self._bwd_chunk(rows)[:, None]], dim=1), self.device)
        rows, bwd = rows[:, :2], rows[:, 2]
        sample = token // S
        dest = self.place[sample]
        tag = (self.slot[sample] * S + token % S) * nb + bwd
        order = torch.sort(dest, stable=True).indices
        self.sent.append((dest[order], rows[order], bwd[order]))
        self.z[c] = None
        matrix = [[0] * self.P for _ in range(self.P)]
        for q in range(self.P):
            got = sum(self._moved(i, q, c, n, self.place_host) for i in range(self.P))
            matrix[q] = got.tolist()
        payload = torch.cat([z[order], _bits(tag[order])[:, None]], dim=1)
        pending = self.layer._a2a(op, payload, matrix)
        recv = [matrix[q][self.me] for q in range(self.P)]

        def unpack() -> torch.Tensor:
            got = pending.wait()
            m = self.layer.hidden
            where = _ints(got[:, m:m + 1]).reshape(-1)
            self.y.index_add_(0, where // nb, got[:, :m])
            self.got.append((recv, where))
            return got

        return Pending(pending, unpack)

    def _block_rows(self, i: int, l: int, c: int) -> torch.Tensor:
        """Rows [lo, hi) of block (i, l) (what member i sent this one for local expert l) in
        forward chunk c, as indices into the block (host)."""
        lo, hi = piece(self.lay.counts[i][self.me][l], c, self.nf, 0, 1)
        return torch.stack([torch.full((hi - lo,), i * self.L + l, dtype=torch.int64),
                            torch.arange(lo, hi)], dim=1)

    def _bwd_chunk(self, rows: torch.Tensor) -> torch.Tensor:
        """The backward chunk of block rows ([block i * L + l, row r] pairs): chunk j of nb
        holds rows [count j / nb, count (j + 1) / nb), so j = floor(((r + 1) nb - 1) / count)."""
        counts = torch.tensor([self.lay.counts[i][self.me][l] for i in range(self.P)
                               for l in range(self.L)], dtype=torch.int64)
        count = counts[rows[:, 0]].clamp_min(1)
        return torch.div((rows[:, 1] + 1) * self.nb - 1, count, rounding_mode="floor")

    # --- backward kernels
    def begin_backward(self, dy: torch.Tensor) -> None:
        keys = [(i, l) for i in range(self.P) for l in range(self.L)]
        self.block = {k: torch.cat([self.recv[c][k] for c in range(self.nf)]) for k in keys}
        self.recv = []
        self.dy = dy
        # Each arrival's source member, arrivals source-major within each chunk.
        src = torch.cat([torch.repeat_interleave(torch.arange(self.P), torch.tensor(recv))
                         for recv, _ in self.got])
        self.got_src = _to(src, self.device)
        self.got_where = torch.cat([w for _, w in self.got])
        self.sent_dest = torch.cat([d for d, _, _ in self.sent])
        self.sent_rows = torch.cat([r for _, r, _ in self.sent])
        # Per backward chunk j (host): the dy exchange's matrix, and where the arrivals
        # tagged j and the rows sent in j start in those grouped by chunk. A stable sort by
        # chunk and these host counts select them with no read back of a mask.
        self.bwd_matrix = []
        for j in range(self.nb):
            matrix = [[0] * self.P for _ in range(self.P)]
            for q in range(self.P):
                moved = sum(self._moved(i, q, j, self.nb, self.place_host)
                            for i in range(self.P)).tolist()
                for d in range(self.P):
                    matrix[d][q] = moved[d]  # rows d sends q: what q sent d tagged j
            self.bwd_matrix.append(matrix)
        got = [sum(m[self.me]) for m in self.bwd_matrix]
        sent = [sum(hi - lo for lo, hi in (self._bwd_piece(i, l, j) for i, l in keys))
                for j in range(self.nb)]
        self.got_at, self.sent_at = np.cumsum([0] + got), np.cumsum([0] + sent)
        self.got_by_chunk = torch.sort(self.got_where % self.nb, stable=True).indices
        self.sent_by_chunk = torch.sort(torch.cat([b for _, _, b in self.sent]),
                                        stable=True).indices
        self.dz: List[Dict[Tuple[int, int], torch.Tensor]] = [dict() for _ in range(self.nb)]
        self.dh: List[Dict[Tuple[int, int], torch.Tensor]] = [dict() for _ in range(self.nb)]
        self.dsend = dy.new_zeros(self.send.shape)
        self.dweight = dy.new_zeros(self.send.shape[0])
        self.grads = [torch.zeros_like(p) for p in self.params]

    def _bwd_piece(self, i: int, l: int, j: int) -> Tuple[int, int]:
        return piece(self.lay.counts[i][self.me][l], j, self.nb, 0, 1)

    def dy_exchange(self, op: object) -> Pending:
        """The gather's backward, chunk j: dy of the rows tagged j back to the members whose
        experts made them, in the order they came; they place them by what they sent."""
        j, nb, P = max(op.chunk, 0), self.nb, self.P
        tagged = self.got_by_chunk[int(self.got_at[j]):int(self.got_at[j + 1])]
        src, where = self.got_src[tagged], self.got_where[tagged]
        order = torch.sort(src, stable=True).indices
        payload = self.dy[where[order] // nb]
        # Rows member d sends member q in chunk j: what q sent d tagged j (every member knows
        # it from the counts and the placement, as in the forward).
        pending = self.layer._a2a(op, payload, self.bwd_matrix[j])
        mine = self.sent_by_chunk[int(self.sent_at[j]):int(self.sent_at[j + 1])]
        dests, rows = self.sent_dest[mine], self.sent_rows[mine]
        # The chunk's dz blocks back to back in (i, l) order: block b = i L + l holds its rows
        # [lo, hi), so row r of it lands at shift[b] + r, shift[b] = (its start) - lo.
        keys = [(i, l) for i in range(P) for l in range(self.L)]
        pieces = [self._bwd_piece(i, l, j) for i, l in keys]
        sizes = [hi - lo for lo, hi in pieces]
        starts = np.cumsum([0] + sizes[:-1])
        shift = _to(torch.tensor([int(s) - lo for s, (lo, _) in zip(starts, pieces)],
                                 dtype=torch.int64), self.device)

        def unpack() -> torch.Tensor:
            got = pending.wait()
            # Arrivals are destination-major, each in the order this member sent them.
            order_back = torch.sort(dests, stable=True).indices
            blocks, offsets = rows[order_back, 0], rows[order_back, 1]
            dz = got.new_zeros((sum(sizes), got.shape[1]))
            dz[shift[blocks] + offsets] = got
            self.dz[j].update(zip(keys, torch.split(dz, sizes)))
            return got

        return Pending(pending, unpack)

    def experts_backward(self, op: object) -> None:
        """The chunk's gradients, the forward recomputed per local expert: dh (residual, LN2
        and expert), each slot's weight gradient, and LN2's and the experts' parameters'."""
        m = self.layer.hidden
        for j in (range(self.nb) if op.chunk < 0 else [op.chunk]):
            for l in range(self.L):
                keys = [(i, l) for i in range(self.P)]
                rows = torch.cat([self.block[k][slice(*self._bwd_piece(*k, j))] for k in keys])
                sizes = [self.dz[j][k].shape[0] for k in keys]
                if rows.shape[0] == 0:
                    self.dh[j].update((k, rows.new_zeros((0, m + 1))) for k in keys)
                    continue
                with torch.enable_grad():
                    h = rows[:, :m].detach().requires_grad_()
                    w = rows[:, m + 2].detach().requires_grad_()
                    ln = [p.detach().requires_grad_() for p in self.params[:2]]
                    params = ln + one_expert(self.params[2:], l)
                    z = self._apply(0, torch.cat([h, rows[:, m:m + 2], w[:, None]], dim=1),
                                    params)
                    dz = torch.cat([self.dz[j][k] for k in keys])
                    got = torch.autograd.grad(z, [h, w, *params], dz, allow_unused=True)
                for acc, g in zip(self.grads[:2], got[2:4]):
                    if g is not None:
                        acc += g
                add_expert_grads(self.grads[2:], l, got[4:])
                dh = torch.cat([got[0], got[1][:, None]], dim=1)
                self.dh[j].update(zip(keys, torch.split(dh, sizes)))
            self.dz[j] = {}

    def dh_exchange(self, op: object) -> Pending:
        """The scatter's backward, chunk j: dh and each slot's weight gradient back to the
        member that ran the gate (the transpose of the forward scatter)."""
        lay, j, nb = self.lay, max(op.chunk, 0), self.nb
        keys = [(i, l) for i in range(self.P) for l in range(self.L)]
        payload = torch.cat([self.dh[j][k] for k in keys])
        matrix = [[sum(lay.size(d, q, l, j, nb, 0) for l in range(self.L))
                   for d in range(self.P)] for q in range(self.P)]
        pending = self.layer._a2a(op, payload, matrix)
        self.dh[j] = {}

        def unpack() -> torch.Tensor:
            got = pending.wait()
            sizes = [lay.size(self.me, q, l, j, nb, 0) for q in range(self.P)
                     for l in range(self.L)]
            blocks = torch.split(got, sizes)
            for (q, l), block in zip([(q, l) for q in range(self.P) for l in range(self.L)],
                                     blocks):
                lo, hi = lay.send_rows(q, l, j, nb, 0)
                self.dsend[lo:hi] = block[:, :-1]
                self.dweight[lo:hi] = block[:, -1]
            return got

        return Pending(pending, unpack)


class _SampleExchange(torch.autograd.Function):
    """Scatter, experts and gather as the schedule's forward ops; its backward ops in
    backward (the expert gradients are recomputed per backward chunk)."""

    @staticmethod
    def forward(ctx, layer: SampleMovingMoE, step: _Step, times: OpTimes, send: torch.Tensor,
                weight: torch.Tensor, *params: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            step.begin_forward(send.detach(), weight.detach(), [p.detach() for p in params])
            try:
                Runner(step.forward_kernels(), times).run(layer.ops["forward"])
            except BaseException:
                step.abandon()  # a solve in flight is collected: the next step may submit
                raise
        ctx.layer, ctx.step, ctx.times = layer, step, times
        return step.y

    @staticmethod
    def backward(ctx, dy: torch.Tensor):
        step = ctx.step
        with torch.no_grad():
            step.begin_backward(dy.contiguous())
            Runner(step.backward_kernels(), ctx.times).run(ctx.layer.ops["backward"])
        return (None, None, None, step.dsend, step.dweight, *step.grads)
