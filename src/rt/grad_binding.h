#pragma once
// The gradient synchronization's AllReduces on the schedule runtime (grad.dense.allreduce,
// grad.expert.allreduce): each op moves part `part` of `parts` of one block's flattened dense
// or expert gradients, packed when the AllReduce starts and written back after it (the
// partitions of Lina's micro-ops and FSMoE's windows are the schedule's, not this binding's).
#include <atomic>
#include <cstdint>
#include <mutex>
#include <set>
#include <utility>
#include <vector>

#include "nn/moe_transformer.h"
#include "rt/executor.h"
#include "sched/op_role.h"

namespace moecomm::rt {

class GradBinding {
 public:
  // sources: the models of the step's other micro-batches, whose gradients are summed into
  // model's (gradient accumulation: the sync moves their sum once per step).
  explicit GradBinding(nn::MoeTransformer& model, std::vector<nn::MoeTransformer*> sources = {})
      : model_(model), sources_(std::move(sources)) {}

  // role: kGradDenseAllReduce or kGradExpertAllReduce; layer: the block. pack sums the
  // sources' gradients with model's; unpack writes into model's.
  void pack(sched::OpRole role, int layer, int part, int parts, OpBuffer& buf);
  void unpack(sched::OpRole role, int layer, int part, int parts, const OpBuffer& buf);

  void start_step();
  // After the step's ops: the sources' gradients of the blocks no op packed (their groups
  // have one rank) summed into model's.
  void finish_step();
  int64_t bytes() const { return bytes_; }  // packed since start_step, this rank

 private:
  nn::MoeTransformer& model_;
  std::vector<nn::MoeTransformer*> sources_;
  std::atomic<int64_t> bytes_ = 0;  // the streams pack concurrently
  std::mutex m_;
  std::set<std::pair<sched::OpRole, int>> packed_;  // this step's (role, block)
};

}  // namespace moecomm::rt
