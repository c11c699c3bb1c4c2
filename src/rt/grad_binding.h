#pragma once
// The gradient synchronization's AllReduces on the schedule runtime (grad.dense.allreduce,
// grad.expert.allreduce): each op moves part `part` of `parts` of one block's flattened dense
// or expert gradients, packed when the AllReduce starts and written back after it (the
// partitions of Lina's micro-ops and FSMoE's windows are the schedule's, not this binding's).
#include <atomic>
#include <cstdint>

#include "nn/moe_transformer.h"
#include "rt/executor.h"
#include "sched/op_role.h"

namespace moecomm::rt {

class GradBinding {
 public:
  explicit GradBinding(nn::MoeTransformer& model) : model_(model) {}

  // role: kGradDenseAllReduce or kGradExpertAllReduce; layer: the block.
  void pack(sched::OpRole role, int layer, int part, int parts, OpBuffer& buf);
  void unpack(sched::OpRole role, int layer, int part, int parts, const OpBuffer& buf);

  void start_step() { bytes_ = 0; }
  int64_t bytes() const { return bytes_; }  // packed since start_step, this rank

 private:
  nn::MoeTransformer& model_;
  std::atomic<int64_t> bytes_ = 0;  // the streams pack concurrently
};

}  // namespace moecomm::rt
