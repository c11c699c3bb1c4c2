#pragma once
// HybridEP's expert transfers on the schedule runtime (moe.hybrid.*), through the codec that
// moves this rank's experts (rt/hybrid_codec.h): the domain AllGather's experts are encoded
// when it starts and decoded into the copies after it; the copies' gradients go home by the
// ReduceScatter; the shared expert's sum is AllReduced.
#include "rt/executor.h"
#include "rt/hybrid_codec.h"
#include "sched/op_role.h"
#include "sched/schedule.h"

namespace moecomm::rt {

// The codec the schedule's expert AllGathers carry (sched::WireCodec, set by the HybridEP
// builder) on `rank`, as the config of its HybridCodec over layers of `experts` experts (E).
// Throws moecomm::Error when the rank joins no expert AllGather, when they disagree (the codec
// keeps one config for every layer) or when their dtype is not fp32 (the experts' own).
HybridCodecConfig expert_codec_config(const sched::Schedule& schedule, int rank, int experts);

class ExpertTransferBinding {
 public:
  explicit ExpertTransferBinding(HybridCodec& codec) : codec_(codec) {}

  // Before the first op of a step: the shared expert from the last backward's AllReduced sum,
  // before any expert is encoded.
  void start_step();
  // role: one of family kExpertTransfer's.
  OpBuffer* buffer(sched::OpRole role, int layer, OpBuffer& buf);
  void after(sched::OpRole role, int layer, const OpBuffer& buf);

 private:
  HybridCodec& codec_;
};

}  // namespace moecomm::rt
