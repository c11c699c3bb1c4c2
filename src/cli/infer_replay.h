#pragma once
// The measured replay of `moecomm infer` (lina.txt Sec. 5.2, 7.3): the first iterations of
// the routing trace profile the expert paths, the rest are cut into batches and replayed on
// the ranks of mpirun, every MoE layer i >= 1 of every batch through one real
// rt::ReplicatedMoeLayer per variant (infer_variants.h).
#include <cstdint>
#include <iosfwd>
#include <memory>
#include <vector>

#include "cli/infer_inputs.h"
#include "cli/infer_variants.h"
#include "infer/path_profile.h"
#include "infer/replication_planner.h"
#include "nn/tensor.h"
#include "rt/comm_pool.h"
#include "rt/replicated_moe.h"

namespace moecomm::cli {

// What the replay measured; times in seconds, each the wall time of the slowest rank.
struct InferReplayResult {
  size_t batches = 0;
  // seconds[variant][scored layer][batch]; scored layer j is MoE layer j + 1
  std::vector<std::vector<std::vector<double>>> seconds;
  // Per scored layer: estimates whose top-2k experts were the actual ones (Sec. 7.3.2).
  std::vector<int64_t> accurate, estimates;
  // Off the critical path (one per batch and layer), and phase two's re-plans (on it).
  std::vector<double> estimate_s, phase_one_s, phase_one_swap_s, replan_s;
  int64_t replanned = 0;
  int64_t swaps[kVariants] = {};  // expert swaps of each variant's layer
  // Per variant, one per (batch, scored layer): the max/mean token-slots per rank under the
  // plan the variant ran, with the counts it ran (Ideal: the balanced routing's).
  std::vector<double> max_over_mean[kVariants];
};

class InferReplay {
 public:
  // Collective: profiles, builds the EP communicator and one layer per variant, all on the
  // baseline placement.
  InferReplay(const InferInputs& in, int rank);
  size_t batch_count() const { return batches_.size(); }
  // Collective. Rank 0 reports each finished batch on `progress`.
  InferReplayResult run(std::ostream& progress);

 private:
  struct Batch {
    int iteration, first_sample;
  };
  // Lina's work before the gate, overlapped with the previous layer.
  struct PhaseOne {
    std::vector<double> estimate;
    infer::ReplicationPlan plan;
  };

  void warm_up();
  void replay_layer(const Batch& batch, int li);
  PhaseOne plan_phase_one(const std::vector<place::LayerRouting>& routing, int s0, int s1, int li);
  bool time_variants(const nn::GateOutput& g, const std::vector<int64_t>& counts,
                     const PhaseOne& one, size_t at);
  void record_balance(InferVariant v, const infer::ReplicationPlan& plan,
                      const std::vector<int64_t>& counts);

  const InferInputs& in_;
  const int rank_;
  const infer::PathProfile profile_;
  const std::vector<Batch> batches_;
  rt::CommPool pool_;
  std::vector<std::unique_ptr<rt::ReplicatedMoeLayer>> layer_;  // one per variant
  const infer::ReplicationOptions ropt_;
  const int lo_, hi_;  // this rank's tokens [lo, hi) of every batch
  const nn::Tensor x_;
  InferReplayResult result_;

  static std::vector<Batch> cut_batches(const InferInputs& in);
};

}  // namespace moecomm::cli
