#include "rt/replicated_experts.h"

#include <algorithm>
#include <string>

#include "core/error.h"

namespace moecomm::rt {

ExpertSwapper::ExpertSwapper(core::FfnType kind, int hidden, int ffn_hidden, uint64_t seed,
                             int experts, int max_experts_per_device) {
  if (experts <= 0 || max_experts_per_device <= 0)
    throw Error("replicated moe", "experts (" + std::to_string(experts) +
                                      ") and max experts per device (" +
                                      std::to_string(max_experts_per_device) + ") must be >= 1");
  for (int e = 0; e < experts; ++e)
    host_.push_back(nn::make_expert(kind, hidden, ffn_hidden, nn::expert_seed(seed, e)));
  // Device slots are allocated once; their initial weights are overwritten on swap-in.
  for (int s = 0; s < max_experts_per_device; ++s)
    slots_.push_back({-1, nn::make_expert(kind, hidden, ffn_hidden, 0)});
}

int ExpertSwapper::slot_of(int e) const {
  for (size_t s = 0; s < slots_.size(); ++s)
    if (slots_[s].expert == e) return static_cast<int>(s);
  return -1;
}

int ExpertSwapper::swap_in(const std::vector<int>& experts) {
  if (experts.size() > slots_.size())
    throw Error("replicated moe", std::to_string(experts.size()) + " experts do not fit in " +
                                      std::to_string(slots_.size()) + " device slots");
  for (Slot& s : slots_)  // evict what the new plan does not keep
    if (std::find(experts.begin(), experts.end(), s.expert) == experts.end()) s.expert = -1;
  int swapped = 0;
  for (int e : experts) {
    if (e < 0 || e >= static_cast<int>(host_.size()))
      throw Error("replicated moe", "no expert " + std::to_string(e));
    if (resident(e)) continue;
    Slot& s = slots_[static_cast<size_t>(slot_of(-1))];
    const std::vector<nn::Param> from = host_[static_cast<size_t>(e)]->params();
    const std::vector<nn::Param> to = s.weights->params();
    for (size_t i = 0; i < from.size(); ++i) {
      *to[i].value = *from[i].value;  // host -> device copy
      swapped_bytes_ += from[i].value->size() * static_cast<int64_t>(sizeof(float));
    }
    s.expert = e;
    ++swapped;
  }
  swaps_ += swapped;
  return swapped;
}

const nn::Expert& ExpertSwapper::expert(int e) const {
  const int s = slot_of(e);
  if (s < 0) throw Error("replicated moe", "expert " + std::to_string(e) + " is not resident");
  return *slots_[static_cast<size_t>(s)].weights;
}

}  // namespace moecomm::rt
