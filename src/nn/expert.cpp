#include "nn/expert.h"

#include "nn/gpt_ffn.h"
#include "nn/mixtral_ffn.h"

namespace moecomm::nn {

void Expert::zero_grad() {
  for (Param& p : params()) p.grad->fill(0.0f);
}

std::unique_ptr<Expert> make_expert(ExpertKind kind, int hidden, int ffn_hidden, uint64_t seed) {
  if (kind == ExpertKind::kGptFfn) return std::make_unique<GptFfn>(hidden, ffn_hidden, seed);
  return std::make_unique<MixtralFfn>(hidden, ffn_hidden, seed);
}

uint64_t expert_seed(uint64_t base, int global_expert) {
  // splitmix64 of (base, e): independent streams per expert.
  uint64_t z = base + 0x9e3779b97f4a7c15ull * (static_cast<uint64_t>(global_expert) + 1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

}  // namespace moecomm::nn
