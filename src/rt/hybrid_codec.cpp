#include "rt/hybrid_codec.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>

#include "nn/sr_codec.h"

namespace moecomm::rt {

struct HybridCodec::Layer {
  std::vector<std::vector<nn::Param>> slots;  // the domain's S L experts, member-major
  std::vector<std::vector<std::vector<nn::Param>>> replicas;  // per replica, its slots
  std::vector<int64_t> numel, start;  // per tensor of one expert: size, flat offset
  std::vector<int64_t> kept;          // per tensor, when compressed
  int64_t floats = 0;                 // parameters of one expert
  int64_t wire = 0;                   // bytes of one expert on the wire
  std::vector<float> shared;          // the shared expert, flat (compressed, w/ S)
  std::vector<float> shared_sum;      // the own experts' sum; AllReduced: E x the next
  std::vector<std::byte> send;
  std::vector<std::vector<float>> received;  // per slot, flat: R, with feedback
  std::vector<float> scratch;                // s + R of one tensor
  std::vector<float> decoded;                // the owner's decode of its own bytes (feedback)
};

HybridCodec::HybridCodec(std::vector<nn::MoeLayer*> layers, int owned_first, int owned,
                         int domain_size, int domain_rank, const HybridCodecConfig& config)
    : owned_first_(owned_first),
      owned_(owned),
      domain_size_(domain_size),
      domain_rank_(domain_rank),
      config_(config) {
  const bool compressed = config.compression < 1.0;
  for (nn::MoeLayer* moe : layers) {
    auto layer = std::make_unique<Layer>();
    if (moe->local_experts() != domain_size * owned)
      throw std::logic_error("hybrid experts: a layer holds " +
                             std::to_string(moe->local_experts()) +
                             " experts, not S L = " + std::to_string(domain_size * owned));
    for (int j = 0; j < moe->local_experts(); ++j) layer->slots.push_back(moe->expert(j).params());
    for (const nn::Param& p : layer->slots.front()) {
      const int64_t n = p.value->size();
      layer->numel.push_back(n);
      layer->start.push_back(layer->floats);
      layer->floats += n;
      layer->kept.push_back(compressed ? nn::sr_kept(n, config.compression) : n);
      layer->wire += compressed ? nn::sr_encoded_bytes(layer->kept.back()) : 4 * n;
    }
    layer->send.resize(static_cast<size_t>(layer->wire * owned));
    if (compressed && config.feedback)
      layer->received.assign(layer->slots.size(),
                             std::vector<float>(static_cast<size_t>(layer->floats), 0.0f));
    if (compressed && config.shared_expert)
      layer->shared_sum.resize(static_cast<size_t>(layer->floats));
    layers_.push_back(std::move(layer));
  }
}

HybridCodec::~HybridCodec() = default;

void HybridCodec::add_replica(const std::vector<nn::MoeLayer*>& layers) {
  if (layers.size() != layers_.size())
    throw std::logic_error("hybrid experts: a replica of " + std::to_string(layers.size()) +
                           " MoE layers, not " + std::to_string(layers_.size()));
  for (size_t l = 0; l < layers.size(); ++l) {
    Layer& layer = *layers_[l];
    if (layers[l]->local_experts() != static_cast<int>(layer.slots.size()))
      throw std::logic_error("hybrid experts: a replica's layer holds " +
                             std::to_string(layers[l]->local_experts()) + " experts, not " +
                             std::to_string(layer.slots.size()));
    std::vector<std::vector<nn::Param>> slots;
    for (int j = 0; j < layers[l]->local_experts(); ++j)
      slots.push_back(layers[l]->expert(j).params());
    layer.replicas.push_back(std::move(slots));
  }
}

bool HybridCodec::shares() const {
  return !layers_.empty() && !layers_.front()->shared_sum.empty();
}

void HybridCodec::refresh_shared(int l) {
  Layer& layer = *layers_.at(size_t(l));
  if (layer.shared_sum.empty()) return;
  layer.shared.resize(layer.shared_sum.size());
  const float inv = 1.0f / static_cast<float>(config_.experts);
  for (size_t i = 0; i < layer.shared.size(); ++i) layer.shared[i] = layer.shared_sum[i] * inv;
}

// What an expert's tensor is encoded against: the shared expert (empty w/o S), plus with
// feedback the residual its receivers hold.
std::span<const float> HybridCodec::reference(Layer& layer, size_t slot, size_t tensor) {
  const size_t at = static_cast<size_t>(layer.start[tensor]);
  const size_t n = static_cast<size_t>(layer.numel[tensor]);
  const std::span<const float> shared = layer.shared.empty()
                                            ? std::span<const float>()
                                            : std::span<const float>(layer.shared).subspan(at, n);
  if (!config_.feedback) return shared;
  const float* r = layer.received[slot].data() + at;
  layer.scratch.resize(n);
  for (size_t i = 0; i < n; ++i) layer.scratch[i] = (shared.empty() ? 0.0f : shared[i]) + r[i];
  return layer.scratch;
}

// Feedback: after a decode against s + R, R = copy - s. The owner decodes its own bytes and
// keeps R the same way, so every holder's R is bit-identical to the owner's, given the same s
// everywhere: the AllReduce's result, identical on every member with the ring (MPI advises,
// and Open MPI's algorithms give, the same sum on every rank).
void HybridCodec::keep_residual(Layer& layer, size_t slot, size_t tensor,
                                std::span<const float> copy) {
  const size_t at = static_cast<size_t>(layer.start[tensor]);
  float* r = layer.received[slot].data() + at;
  for (size_t i = 0; i < copy.size(); ++i)
    r[i] = copy[i] - (layer.shared.empty() ? 0.0f : layer.shared[at + i]);
}

const std::vector<std::byte>& HybridCodec::encode(int l) {
  Layer& layer = *layers_.at(size_t(l));
  std::byte* out = layer.send.data();
  for (int j = owned_first_; j < owned_first_ + owned_; ++j) {
    for (size_t t = 0; t < layer.numel.size(); ++t) {
      const nn::Param& p = layer.slots[static_cast<size_t>(j)][t];
      const std::span<const float> w(p.value->data(), static_cast<size_t>(layer.numel[t]));
      if (config_.compression >= 1.0) {
        std::memcpy(out, w.data(), w.size_bytes());
        out += w.size_bytes();
        continue;
      }
      const std::span<std::byte> encoded(out,
                                         static_cast<size_t>(nn::sr_encoded_bytes(layer.kept[t])));
      const std::span<const float> ref = reference(layer, static_cast<size_t>(j), t);
      nn::sr_encode(w, ref, layer.kept[t], encoded);
      if (config_.feedback) {  // R moves exactly as at every receiver
        layer.decoded.resize(w.size());
        nn::sr_decode(encoded, ref, layer.decoded);
        keep_residual(layer, static_cast<size_t>(j), t, layer.decoded);
      }
      out += encoded.size();
    }
  }
  return layer.send;
}

const std::vector<std::byte>& HybridCodec::encode_buffer(int l) const {
  return layers_.at(size_t(l))->send;
}

void HybridCodec::decode(int l, std::span<const std::byte> gathered) {
  Layer& layer = *layers_.at(size_t(l));
  if (gathered.size() != layer.send.size() * size_t(domain_size_))
    throw std::logic_error("hybrid experts: gathered " + std::to_string(gathered.size()) +
                           " bytes, expected " +
                           std::to_string(layer.send.size() * size_t(domain_size_)));
  const std::byte* in = gathered.data();
  for (int m = 0; m < domain_size_; ++m) {
    for (int j = m * owned_; j < (m + 1) * owned_; ++j) {
      for (size_t t = 0; t < layer.numel.size(); ++t) {
        const nn::Param& p = layer.slots[static_cast<size_t>(j)][t];
        const std::span<float> w(p.value->data(), static_cast<size_t>(layer.numel[t]));
        const int64_t bytes = config_.compression >= 1.0 ? static_cast<int64_t>(w.size_bytes())
                                                         : nn::sr_encoded_bytes(layer.kept[t]);
        if (m != domain_rank_ && config_.compression >= 1.0) {
          std::memcpy(w.data(), in, w.size_bytes());
        } else if (m != domain_rank_) {  // HybridEP: SRDecode (the owner keeps its exact weights)
          nn::sr_decode(std::span<const std::byte>(in, static_cast<size_t>(bytes)),
                        reference(layer, static_cast<size_t>(j), t), w);
          if (config_.feedback) keep_residual(layer, static_cast<size_t>(j), t, w);
        }
        in += bytes;
      }
    }
  }
  for (const auto& replica : layer.replicas)  // the copies as decoded, exactly
    for (size_t j = 0; j < layer.slots.size(); ++j) {
      if (is_own(static_cast<int>(j))) continue;
      for (size_t t = 0; t < layer.numel.size(); ++t)
        std::copy_n(layer.slots[j][t].value->data(), layer.numel[t], replica[j][t].value->data());
    }
}

std::vector<float> HybridCodec::slot_grads(int l) const {
  const Layer& layer = *layers_.at(size_t(l));
  std::vector<float> grads;
  grads.reserve(static_cast<size_t>(layer.floats) * layer.slots.size());
  for (const std::vector<nn::Param>& expert : layer.slots)
    for (const nn::Param& p : expert)
      grads.insert(grads.end(), p.grad->data(), p.grad->data() + p.grad->size());
  for (const auto& replica : layer.replicas) {  // gradient accumulation over micro-batches
    float* at = grads.data();
    for (const std::vector<nn::Param>& expert : replica)
      for (const nn::Param& p : expert)
        for (int64_t i = 0; i < p.grad->size(); ++i) *at++ += p.grad->data()[i];
  }
  return grads;
}

void HybridCodec::take_grads(int l, std::span<const float> mine) {
  Layer& layer = *layers_.at(size_t(l));
  const float* in = mine.data();
  for (const auto& replica : layer.replicas)  // their sum is in `mine` and the copies' owners'
    for (const std::vector<nn::Param>& expert : replica)
      for (const nn::Param& p : expert) p.grad->fill(0.0f);
  for (size_t j = 0; j < layer.slots.size(); ++j) {
    const bool own = is_own(static_cast<int>(j));
    for (const nn::Param& p : layer.slots[j]) {
      if (own) {
        std::copy(in, in + p.grad->size(), p.grad->data());
        in += p.grad->size();
      } else {
        p.grad->fill(0.0f);
      }
    }
  }
}

std::vector<float> HybridCodec::own_sum(int l) const {
  const Layer& layer = *layers_.at(size_t(l));
  std::vector<float> sum(layer.shared_sum.size(), 0.0f);
  if (sum.empty()) return sum;
  for (int j = owned_first_; j < owned_first_ + owned_; ++j) {
    size_t i = 0;
    for (const nn::Param& p : layer.slots[static_cast<size_t>(j)])
      for (int64_t k = 0; k < p.value->size(); ++k) sum[i++] += p.value->data()[k];
  }
  return sum;
}

void HybridCodec::set_shared_sum(int l, std::span<const float> summed) {
  Layer& layer = *layers_.at(size_t(l));
  if (summed.size() != layer.shared_sum.size())
    throw std::logic_error("hybrid experts: a shared sum of " + std::to_string(summed.size()) +
                           " values for " + std::to_string(layer.shared_sum.size()));
  std::copy(summed.begin(), summed.end(), layer.shared_sum.begin());
}

int64_t HybridCodec::wire_bytes_per_expert() const {
  return layers_.empty() ? 0 : layers_.front()->wire;
}

}  // namespace moecomm::rt
