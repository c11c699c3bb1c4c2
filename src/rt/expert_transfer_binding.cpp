#include "rt/expert_transfer_binding.h"

#include <cstring>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/error.h"

namespace moecomm::rt {

HybridCodecConfig expert_codec_config(const sched::Schedule& schedule, int rank, int experts) {
  std::optional<sched::WireCodec> codec;
  std::string first;
  for (sched::OpId id : schedule.ops_of(rank)) {
    if (schedule.label(id).role != sched::OpRole::kExpertTransferAllGather) continue;
    const sched::WireCodec& c = schedule.collective(schedule.op(id).collective).codec;
    if (!codec) {
      codec = c;
      first = schedule.describe(id);
    } else if (!(c == *codec)) {
      throw Error(schedule.describe(id), "carries another codec than " + first +
                                             "; HybridEP's codec keeps one for every layer");
    }
  }
  if (!codec)
    throw Error("rank " + std::to_string(rank) + "'s schedule",
                "has no expert AllGather to take HybridEP's codec from");
  if (codec->dtype != core::Dtype::kFp32)
    throw Error(first, "codec dtype " + std::string(core::to_string(codec->dtype)) +
                           ": the runtime's experts travel as fp32");
  return {codec->compression, codec->shared_reference, experts, codec->error_feedback};
}

void ExpertTransferBinding::start_step() {
  for (int l = 0; l < codec_.layers(); ++l) codec_.refresh_shared(l);
}

OpBuffer* ExpertTransferBinding::buffer(sched::OpRole role, int layer, OpBuffer& buf) {
  if (role == sched::OpRole::kExpertTransferAllGather) {
    buf.data = codec_.encode(layer);  // this step's experts, when the AllGather starts
    return &buf;
  }
  const std::vector<float> floats = role == sched::OpRole::kExpertTransferGradReduceScatter
                                        ? codec_.slot_grads(layer)
                                        : codec_.own_sum(layer);
  buf.data.resize(floats.size() * sizeof(float));
  std::memcpy(buf.data.data(), floats.data(), buf.data.size());
  return &buf;
}

void ExpertTransferBinding::after(sched::OpRole role, int layer, const OpBuffer& buf) {
  if (role == sched::OpRole::kExpertTransferAllGather) return codec_.decode(layer, buf.data);
  const std::span<const float> floats(reinterpret_cast<const float*>(buf.data.data()),
                                      buf.data.size() / sizeof(float));
  if (role == sched::OpRole::kExpertTransferGradReduceScatter)
    return codec_.take_grads(layer, floats);
  codec_.set_shared_sum(layer, floats);
}

}  // namespace moecomm::rt
