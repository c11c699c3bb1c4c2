#include "rt/grad_binding.h"

#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

namespace moecomm::rt {
namespace {

std::vector<nn::Param*> grad_params(nn::MoeTransformer& model, sched::OpRole role, int layer) {
  return role == sched::OpRole::kGradDenseAllReduce ? model.block_dense_params(layer)
                                                    : model.block_expert_params(layer);
}

// Calls f(pointer, count) for the parts of the flattened gradients in [first, last).
template <class F>
void for_range(const std::vector<nn::Param*>& params, int64_t first, int64_t last, F f) {
  int64_t at = 0;
  for (nn::Param* p : params) {
    const int64_t n = p->grad->size(), lo = std::max(first, at), hi = std::min(last, at + n);
    if (lo < hi) f(p->grad->data() + (lo - at), hi - lo);
    at += n;
  }
}

std::pair<int64_t, int64_t> part_range(const std::vector<nn::Param*>& params, int part, int parts) {
  int64_t total = 0;
  for (nn::Param* p : params) total += p->grad->size();
  return {total * part / parts, total * (part + 1) / parts};
}

}  // namespace

void GradBinding::pack(sched::OpRole role, int layer, int part, int parts, OpBuffer& buf) {
  const auto params = grad_params(model_, role, layer);
  const auto [first, last] = part_range(params, part, parts);
  buf.data.resize(size_t(last - first) * sizeof(float));
  std::byte* out = buf.data.data();
  for_range(params, first, last, [&](const float* p, int64_t n) {
    std::memcpy(out, p, size_t(n) * sizeof(float));
    out += n * int64_t(sizeof(float));
  });
  if (!sources_.empty()) {
    float* sum = reinterpret_cast<float*>(buf.data.data());
    for (nn::MoeTransformer* source : sources_) {
      float* at = sum;
      for_range(grad_params(*source, role, layer), first, last, [&](const float* p, int64_t n) {
        for (int64_t i = 0; i < n; ++i) at[i] += p[i];
        at += n;
      });
    }
    const std::lock_guard lock(m_);
    packed_.insert({role, layer});
  }
  bytes_ += int64_t(buf.data.size());
}

void GradBinding::start_step() {
  bytes_ = 0;
  packed_.clear();
}

void GradBinding::finish_step() {
  if (sources_.empty()) return;
  const int blocks = model_.config().layers;
  for (const sched::OpRole role :
       {sched::OpRole::kGradDenseAllReduce, sched::OpRole::kGradExpertAllReduce})
    for (int l = 0; l < blocks; ++l) {
      if (packed_.count({role, l})) continue;
      const auto params = grad_params(model_, role, l);
      for (nn::MoeTransformer* source : sources_) {
        const auto from = grad_params(*source, role, l);
        for (size_t i = 0; i < params.size(); ++i) params[i]->grad->add(*from[i]->grad);
      }
    }
}

void GradBinding::unpack(sched::OpRole role, int layer, int part, int parts, const OpBuffer& buf) {
  const auto params = grad_params(model_, role, layer);
  const auto [first, last] = part_range(params, part, parts);
  const std::byte* in = buf.data.data();
  for_range(params, first, last, [&](float* p, int64_t n) {
    std::memcpy(p, in, size_t(n) * sizeof(float));
    in += n * int64_t(sizeof(float));
  });
}

}  // namespace moecomm::rt
