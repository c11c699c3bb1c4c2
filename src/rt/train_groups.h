#pragma once
// The rank groups of `moecomm train` under tensor parallelism (DESIGN.md "Parallel", the
// Megatron-Core folding the simulator uses, core/rank_groups.h): TP = ESP groups are tp
// consecutive ranks, DP groups the ranks of one TP index, EP groups hold one rank of each TP
// group of an EP block (same TP index), EDP groups repeat the EP position across blocks. The
// members of a TP group see the same tokens: attention is sharded over them by heads
// (Megatron-LM), the rest of the dense model is replicated (its gradients are equal on
// them), the experts are sharded over them (ESP), and the MoE token path is replicate or
// MoNTA's Drop + A2A + AllGather (the schedule runtime, model_binding.h).
#include <vector>

#include "core/parallel_config.h"
#include "core/rank_groups.h"
#include "rt/comm_pool.h"

namespace moecomm::rt {

struct TrainGroups {
  core::ParallelConfig parallel;           // world = tp x dp x pp; MoE: esp (= tp) x ep x edp x pp
  core::RankGroup world, tp, dp, ep, edp;  // this rank's groups (tp is also the ESP group)
  core::RankGroup pp;                      // this rank's pipeline: one rank per stage
  int tp_index = 0;                        // this rank's index in its TP group (its expert shard)
  int stage = 0;                           // this rank's pipeline stage
  // Which batch this rank trains on: its TP group's within the stage, the same on every stage
  // of a pipeline.
  int data_rank = 0;
  int data_ranks = 1;  // distinct batches per step (world / (tp pp))
};

// Throws moecomm::Error naming `where` when tp, ep or pp do not fit the world or the experts.
// pp stages are the slowest dimension: stage s holds ranks [s world/pp, (s+1) world/pp), each
// folded into tp, dp, ep and edp as a world of its own (core::build_rank_groups).
TrainGroups train_groups(int world, int tp, int ep, int experts, int me, const std::string& where,
                         int pp = 1);

// Every group of every rank on `channels` channels (0: the token path; more for its
// communication threads and the gradient AllReduce thread), the same list on every rank.
std::vector<CommKey> train_comm_keys(const core::ParallelConfig& parallel, int channels);

}  // namespace moecomm::rt
