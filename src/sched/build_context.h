#pragma once
// Shared state of the per-knob builders (build_*.cpp) and the primitives they emit ops with.
// Internal to the sched layer: users call build_training_step (layer_builder.h).
#include <optional>
#include <string>
#include <vector>

#include "core/rank_groups.h"
#include "sched/layer_builder.h"
#include "sched/layer_workload.h"

namespace moecomm::sched {

// Per rank, the ops the next step of the data path waits on.
using Frontier = std::vector<std::vector<OpId>>;

// How tokens travel through the MoE part under the strategy and parallel sizes.
struct TokenPath {
  double a2a_fraction = 1;     // of LayerWorkload::a2a_bytes per rank (1 / tp: drop-allgather)
  bool esp_gather = false;     // ESP AllGather before the experts, ReduceScatter after
  bool esp_allreduce = false;  // replicated tokens: ESP AllReduce of the partial outputs
  bool tp_gather = false;      // drop-allgather: TP AllGather after the combine A2A
  // Per EP group, the unchunked dispatch pair matrix (n x n, row-major, with a2a_fraction).
  std::vector<std::vector<double>> dispatch;
  // Per EP group, the forward combine matrix (experts -> samples' positions): the dispatch's
  // transpose unless NetMoE moved the samples.
  std::vector<std::vector<double>> combine;
  std::vector<double> expert_scale;  // per rank: rows it computes / balanced rows
  // a2a=dedup: per EP group, the dispatch's rows once per (token, member) and its node bytes
  // (sched/dedup_traffic.h), unchunked, with a2a_fraction; empty otherwise.
  std::vector<std::vector<double>> dedup_pairs, dedup_nodes;
};

// What a layer's backward leaves for the gradient synchronization (per rank, kNone: none).
struct LayerGrads {
  std::vector<OpId> dense_ready;   // the layer's dense gradients exist after this op
  std::vector<OpId> expert_ready;  // the layer's expert gradients exist after this op
  std::vector<OpId> window;        // FSMoE: the last backward dispatch A2A (window opens)
};

struct BuildContext {
  BuildContext(const LayerSetup& setup, const core::RankGroups& groups);

  const LayerSetup& setup;
  const Strategy& strategy;
  const core::RankGroups& groups;
  LayerWorkload work;
  Schedule schedule;
  TokenPath path;
  Frontier ready;  // the data path's frontier
  int layer = 0;
  Phase phase = Phase::kForward;
  std::vector<OpId> prefetch;  // per rank: HybridEP's expert AllGather of this layer
  Frontier step_start;         // the forward's first frontier (HybridEP's send queue)
  // HybridEP's member order per EP group (hybrid_member_order; empty: consecutive domains).
  std::vector<std::vector<int>> hybrid_orders;
  std::vector<LayerGrads> grads;    // per layer
  std::vector<OpId> targets_moved;  // per rank: NetMoE's targets AllGather (kNone: none)
  // The part of the step being built (layer_builder.cpp): the ranks of one pipeline stage (the
  // primitives emit ops for them only), the micro-batch (-1: the step has one), and the blocks
  // [layer_begin, layer_end) of the stage's model chunk.
  std::vector<char> in_stage;
  int micro_batch = -1;
  bool first_micro_batch = true;  // its forward gathers HybridEP's experts for the step
  bool last_micro_batch = true;   // its backward synchronizes the step's gradients
  int layer_begin = 0, layer_end = 0;
  // Per layer, per rank: HybridEP's expert AllGather, shared by the step's micro-batches.
  std::vector<std::vector<OpId>> layer_prefetch;

  int world() const { return schedule.world_size(); }
  bool active(int rank) const { return in_stage[size_t(rank)] != 0; }
  bool active(const core::RankGroup& group) const {
    return !group.empty() && active(group.front());
  }
  int chunks() const;  // of the current phase
  // Layer l's dense gradient bytes per rank: LayerSetup::dense_grad_bytes, else the workload's.
  double dense_grad_bytes(int layer) const;
  Label label(OpRole role, const std::string& knob = "", int chunk = -1) const;
};

// --- primitives: each adds one op per rank (or per group member) after `in` and returns
// the new frontier. Groups of one rank add nothing (the frontier passes through).
Frontier compute_step(BuildContext& ctx, const std::vector<double>& flops, const Label& label,
                      const Frontier& in);
Frontier compute_step(BuildContext& ctx, double flops, const Label& label, const Frontier& in);
Frontier copy_step(BuildContext& ctx, double bytes, int stream, const Label& label,
                   const Frontier& in);
// The codec of the collectives a builder emits as they are: the model's dtype on the wire
// (dtype_bytes, the bytes the workload counts), sent dense.
WireCodec plain_codec(const BuildContext& ctx);
// The direction token rows travel in (wire_dtype.h's A2ADtype): toward the experts or back.
enum class TokenDirection { kDispatch, kCombine };
// The codec of the token rows in `direction`: the strategy's a2a_dtype, else plain_codec.
WireCodec token_codec(const BuildContext& ctx, TokenDirection direction);
// Wire bytes per workload byte of token rows in `direction`: wire_row_bytes(h, a2a_dtype) over
// the workload's row (h x dtype_bytes); 1 without a2a_dtype (the rows travel as the model's).
double token_wire_scale(const BuildContext& ctx, TokenDirection direction);
// Same-sized collective over every group of `groups` (AllGather, ReduceScatter, AllReduce).
Frontier group_step(BuildContext& ctx, const std::vector<core::RankGroup>& groups, OpKind kind,
                    double bytes, int stream, const Label& label, const Frontier& in,
                    int priority = 0);
// The same with bytes per group (bytes[k] for groups[k]) and, when given, the codec the
// payload travels with (else plain_codec; `bytes` are the encoded bytes either way).
Frontier group_step(BuildContext& ctx, const std::vector<core::RankGroup>& groups, OpKind kind,
                    const std::vector<double>& bytes, int stream, const Label& label,
                    const Frontier& in, int priority = 0,
                    const std::optional<WireCodec>& codec = std::nullopt);
// A2A over every EP group with per-group pair matrices (n x n, encoded bytes) and the codec
// they travel with; a2a=dedup also takes its per-group node matrices
// (CollectiveSpec::node_bytes, encoded bytes) and the direction its plan runs.
Frontier a2a_step(BuildContext& ctx, const std::vector<std::vector<double>>& pairs,
                  const Label& label, const Frontier& in, int priority, const WireCodec& codec,
                  const std::vector<std::vector<double>>& node_bytes = {},
                  A2ADirection direction = A2ADirection::kDispatch);

Frontier single(const std::vector<OpId>& per_rank);  // {op} per rank; kNone: {}
Frontier merge(const std::vector<Frontier>& parts);  // union per rank
// Per rank, the op of `f` added last (kNone if none): a handle for later dependencies.
std::vector<OpId> last_of(const Frontier& f);

}  // namespace moecomm::sched
