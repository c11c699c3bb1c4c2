#include "rt/expert_transfer_binding.h"

#include <cstring>
#include <span>
#include <vector>

namespace moecomm::rt {

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
