#pragma once
// placement=netmoe on the schedule runtime (DESIGN.md "One schedule, three executors"): the
// kernels and buffers of NetMoE's ops in the training step's schedule (sched/build_dispatch.cpp),
// each running one stage of the layer's nn::SampleMovingMoe (NetMoE Alg. 1): ModelBinding's
// MoE path (moe_path_binding.h) when the schedule has NetMoE's ops. How many chunks each phase
// has and in which order the ops run come from the schedule.
//   gate (forward)      the gate, the order and the per-sample counts (line 9).
//   moe.netmoe.counts_allgather  the group's sample ids and counts; moe.netmoe.solve (on its
//                       own stream) builds and solves the placement problem from them
//                       (NetMoePlanner, place::SamplePlacer), as every member does alike.
//   moe.netmoe.aux_allgather     the aux loss's sums per home rank.
//   moe.dispatch.a2a    the scatter (line 10): h with its metadata columns (global token,
//                       first slot, weight); forward chunks carry the sender's row counts for
//                       the destination's L experts ahead of the rows.
//   moe.expert          the experts and the inlined residual (lines 11-12).
//   moe.combine.a2a     the gather to the samples' new ranks (lines 13-14), each row tagged
//                       with its place there.
//   moe.netmoe.targets_allgather the group's targets, for the samples held at the head.
// Backward: moe.dispatch.a2a carries dy from the new ranks to the experts, moe.combine.a2a the
// input gradients (and each slot's weight gradient) back; gate ends the layer's backward.
#include <array>
#include <chrono>
#include <optional>
#include <vector>

#include "nn/moe_transformer.h"
#include "place/sample_placer.h"
#include "rt/executor.h"
#include "rt/moe_path_binding.h"
#include "rt/netmoe_planner.h"

namespace moecomm::rt {

struct NetMoeStats {
  double solve_us = 0;  // the solver's own time, summed over layers
  double wait_us = 0;   // the part of it past the first expert chunk: not hidden
  int solves = 0;
};

class NetMoeBinding final : public MoePathBinding {
 public:
  // world: the schedule's world size; a2a_group: the EP group's world ranks (the A2As'
  // members); member: this rank's index there; chunks[l]: layer l's forward and backward
  // chunk counts, from the schedule. Throws Error unless the model can move samples.
  NetMoeBinding(nn::MoeTransformer& model, int world, const core::RankGroup& a2a_group, int member,
                int ranks_per_node, std::vector<std::array<int, 2>> chunks);

  // The gate (forward: gate_forward, backward: gate_backward), experts and solve.
  void add_kernels(std::map<sched::OpRole, Kernel>& kernels) override;
  // The A2As and NetMoE's AllGathers: the op's buffer, and its epilogue (the data received).
  bool has_buffer(sched::OpRole role) const override { return op_of(role).has_value(); }
  OpBuffer* buffer(sched::OpRole role, int layer, int phase, int chunk) override;
  void after(sched::OpRole role, int layer, int phase, int chunk) override;

  void start_step(const std::vector<int>& targets, int seq_len) override;
  // Kernels.
  void gate_forward(int layer);
  void gate_backward(int layer);
  void expert(int layer, int phase, int chunk);  // chunk -1: every chunk
  void solve(int layer);
  void forward_done(int layer) override;    // the layer's output becomes the residual stream
  void backward_begin(int layer) override;  // the residual stream's gradient enters the layer

  // Metadata bytes this step sent to each world rank (headers, metadata columns), counted
  // apart from the token rows.
  const std::vector<int64_t>& meta_bytes() const override { return meta_bytes_; }
  // Since construction, forward rows this rank sent to each EP member: scatters (to the
  // experts) and gathers (to the samples' new ranks), and how many scatters (layers x runs).
  const std::vector<int64_t>& scatter_rows() const { return scatter_rows_; }
  const std::vector<int64_t>& gather_rows() const { return gather_rows_; }
  int64_t scatters() const { return scatters_; }
  const NetMoeStats& stats() const { return stats_; }  // this step's

 private:
  enum class Op { kDispatch, kCombine, kCounts, kAux, kTargets };
  static std::optional<Op> op_of(sched::OpRole role);
  OpBuffer* op_buffer(Op op, int layer, int phase, int chunk);
  void op_after(Op op, int layer, int phase, int chunk);
  using Clock = std::chrono::steady_clock;
  struct Layer {
    OpBuffer counts, aux;
    std::vector<OpBuffer> fwd[2], bwd[2];  // [0] dispatch, [1] combine, per chunk
    Clock::time_point solved, first_expert;
    bool has_layout = false;
  };
  Layer& layer(int l) { return layers_.at(size_t(l)); }
  void fill(OpBuffer& buf, const nn::SampleMovingMoe::Rows& rows, const std::vector<int>& header_of,
            bool forward_scatter);
  nn::Tensor received(int layer, OpBuffer& buf, int meta_cols, bool headers);
  void count_meta(int member, int64_t bytes);

  nn::MoeTransformer& model_;
  int world_;
  core::RankGroup group_;
  int member_;
  int64_t cols_;
  NetMoePlanner planner_;
  place::SamplePlacer placer_;
  std::vector<std::array<int, 2>> chunks_;
  std::vector<Layer> layers_;
  OpBuffer targets_;
  std::vector<int> gathered_;  // the last counts AllGather, for the solve
  std::vector<int64_t> meta_bytes_, scatter_rows_, gather_rows_;
  int64_t scatters_ = 0;
  NetMoeStats stats_;
};

}  // namespace moecomm::rt
