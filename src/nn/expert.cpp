#include "nn/expert.h"

#include <string>

#include "core/error.h"

#include "nn/gpt_ffn.h"
#include "nn/mixtral_ffn.h"

namespace moecomm::nn {

void Expert::zero_grad() {
  for (Param& p : params()) p.grad->fill(0.0f);
}

std::unique_ptr<Expert> make_expert(core::FfnType ffn_type, int hidden, int ffn_hidden,
                                    uint64_t seed, int shard, int shards) {
  if (shards < 1 || shard < 0 || shard >= shards || ffn_hidden % shards != 0)
    throw Error("expert shard", "shard " + std::to_string(shard) + " of " + std::to_string(shards) +
                                    " needs shards >= 1 dividing ffn_hidden " +
                                    std::to_string(ffn_hidden));
  const FfnShard part{shard, shards};
  if (ffn_type == core::FfnType::kGelu)
    return std::make_unique<GptFfn>(hidden, ffn_hidden, seed, part);
  return std::make_unique<MixtralFfn>(hidden, ffn_hidden, seed, part);
}

uint64_t expert_seed(uint64_t base, int global_expert) {
  // splitmix64 of (base, e): independent streams per expert.
  uint64_t z = base + 0x9e3779b97f4a7c15ull * (static_cast<uint64_t>(global_expert) + 1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

}  // namespace moecomm::nn
