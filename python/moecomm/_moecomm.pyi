"""Type stubs of the extension module (python/src): the classes the package's functions
return. The functions themselves are called through moecomm, moecomm.place and
moecomm.infer, which carry their signatures and docstrings."""
from typing import Any, Optional

import numpy as np

class Error(ValueError):
    """Bad input: the message the command line prints after "error: "."""

DEFAULT_COMPLETION_TOLERANCE: float

class PlanRow:
    name: str
    forward_ms: float
    backward_ms: float
    total_ms: float
    memory_GB: float
    strategy: str
    parallel: str
    params: dict[str, Any]
    source: str
    model_estimate: Optional[dict[str, float]]
    notes: list[str]

class SearchStats:
    candidates: int
    refused: int
    wall_s: float
    converged: bool

class Plan:
    rows: list[PlanRow]
    recommended: str
    best: PlanRow
    skipped: dict[str, str]
    model_fastest: str
    search: SearchStats
    layers: int
    model: str
    cluster: str
    world: int
    parallel: dict[str, Any]
    workload: dict[str, Any]
    def row(self, name: str) -> PlanRow: ...
    def to_dict(self) -> dict[str, Any]: ...

class SimResult:
    iteration_ms: float
    forward_ms: float
    backward_ms: float
    level_names: list[str]
    bytes_by_level: list[float]
    bytes_by_level_name: dict[str, float]
    flows: int
    ranks: int
    schedule_ops: int
    wall_s: float
    strategy: str
    strategy_notes: list[str]
    ops: dict[str, dict[str, float]]
    busiest_links: list[dict[str, Any]]
    routing: Optional[dict[str, Any]]
    trace: Optional[dict[str, Any]]

class Placement:
    sample_device: np.ndarray
    inter_node_tokens: int
    intra_node_tokens: int
    solve_us: float
    wait_us: float

class ReplicationPlan:
    devices_of_expert: list[list[int]]
    max_over_mean: float
    ep_max_over_mean: float
    def experts_of_device(self, devices: int) -> list[list[int]]: ...

class OpFamily:
    """The part of the step a role belongs to (sched::OpFamily)."""
    dense: OpFamily
    dense_comm: OpFamily
    pipeline: OpFamily
    token_path: OpFamily
    placement: OpFamily
    expert_transfer: OpFamily
    grad_sync: OpFamily
    @property
    def name(self) -> str: ...
    @property
    def value(self) -> int: ...

class OpRole:
    """What an op is for (sched::OpRole); executors bind kernels and buffers by it."""
    attn: OpRole
    attn_cp_allgather: OpRole
    attn_cp_reducescatter: OpRole
    attn_tp_allreduce: OpRole
    gate: OpRole
    head: OpRole
    pp_send_activations: OpRole
    pp_send_grads: OpRole
    pp_recv_activations: OpRole
    pp_recv_grads: OpRole
    dispatch_a2a: OpRole
    dispatch_esp_allgather: OpRole
    dispatch_esp_allgather_copy: OpRole
    expert: OpRole
    combine_esp_reducescatter: OpRole
    combine_esp_allreduce: OpRole
    combine_a2a: OpRole
    combine_tp_allgather: OpRole
    combine_tp_allgather_copy: OpRole
    netmoe_counts_allgather: OpRole
    netmoe_aux_allgather: OpRole
    netmoe_solve: OpRole
    netmoe_targets_allgather: OpRole
    hybrid_expert_allgather: OpRole
    hybrid_grad_reducescatter: OpRole
    hybrid_shared_allreduce: OpRole
    grad_dense_allreduce: OpRole
    grad_expert_allreduce: OpRole
    @property
    def label_name(self) -> str: ...
    @property
    def family(self) -> OpFamily: ...
    @property
    def name(self) -> str: ...
    @property
    def value(self) -> int: ...

class ScheduleOp:
    id: int
    rank: int
    stream: int
    stream_name: str
    priority: int
    kind: str
    name: str
    role: OpRole
    yields_to_traffic: bool
    waits_for_micro_ops: bool
    layer: int
    phase: str
    chunk: int
    knob: str
    flops: float
    bytes: float
    collective: int
    member: int
    peer: int
    tag: int
    prev: int
    deps: list[int]

class WireCodec:
    dtype: str
    compression: float
    shared_reference: bool
    error_feedback: bool

class ScheduleCollective:
    id: int
    kind: str
    algorithm: str
    name: str
    role: OpRole
    group: list[int]
    bytes: float
    pair_bytes: list[float]
    root: int
    priority: int
    codec: WireCodec

class Schedule:
    world_size: int
    num_ops: int
    strategy: str
    strategy_notes: list[str]
    ranks_per_node: int
    parallel: dict[str, int]
    hybrid: bool
    hybrid_domain: int
    a2a_dtype: Optional[str]
    def ops(self, rank: int) -> list[ScheduleOp]: ...
    def collective(self, id: int) -> ScheduleCollective: ...
    def ep_order(self, rank: int) -> tuple[list[int], list[int]]: ...
    def simulated_times(self, compute_efficiency: float = 0.0) -> list[tuple[float, float]]: ...
    def refusal(self, executor: str, capacity_factor: float = 0.0,
                token_choice_gate: bool = True) -> Optional[tuple[str, str]]: ...
    def unbound_ops(self, executor: str) -> list[dict[str, Any]]: ...

def build_schedule(model: Any, cluster: Any, parallel: Any, strategy: str, layers: int = 1,
                   seq_len: int = 0, micro_batch: int = 0, routing: str = "auto",
                   locality: float = 0.9, lm_head: bool = False) -> Schedule: ...
class RoutingMemberStep:
    sends: list[tuple[int, list[tuple[int, int]]]]
    recvs: list[tuple[int, list[tuple[int, int]]]]

class A2ARouting:
    algorithm: str
    members: int
    direct: bool
    steps: list[list[tuple[int, int, list[tuple[int, int]]]]]
    def member_steps(self, member: int) -> list[RoutingMemberStep]: ...

def a2a_routing(algorithm: str, group: list[int], ranks_per_node: int) -> A2ARouting: ...
def a2a_algorithms() -> list[str]: ...
def routed_a2a_algorithms() -> list[str]: ...
def members_by_node(group: list[int], ranks_per_node: int) -> list[list[int]]: ...
def sr_kept(numel: int, compression: float) -> int: ...
def sr_encode(weights: np.ndarray, shared: np.ndarray, k: int) -> np.ndarray: ...
def sr_decode(encoded: np.ndarray, shared: np.ndarray, numel: int) -> np.ndarray: ...
def router_groups_problem(experts: int, top_k: int, router_groups: int,
                          router_group_top_k: int) -> Optional[tuple[str, str]]: ...
def limits_groups(router_groups: int, router_group_top_k: int) -> bool: ...
def hybrid_destinations(members: int, domain: int, order: list[int], member: int) -> list[int]: ...

def __getattr__(name: str) -> Any: ...  # the functions the package wraps
