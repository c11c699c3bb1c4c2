#include "rt/hybrid_experts.h"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <stdexcept>
#include <string>

#include "core/error.h"
#include "core/rank_groups.h"
#include "nn/sr_codec.h"
#include "rt/collectives.h"
#include "sched/build_hybridep.h"

namespace moecomm::rt {

HybridLayout hybrid_layout(const core::RankGroup& ep, int ep_index, int domain_size,
                           const std::vector<int>& order_in, const std::string& where) {
  const int n = static_cast<int>(ep.size());
  if (domain_size < 1 || n % domain_size != 0)
    throw Error(where, "hybrid_domain=" + std::to_string(domain_size) +
                           " must divide the EP group's " + std::to_string(n) + " ranks");
  std::vector<int> order = order_in;
  if (order.empty()) {
    order.resize(static_cast<size_t>(n));
    std::iota(order.begin(), order.end(), 0);
  }
  std::vector<int> sorted = order;
  std::sort(sorted.begin(), sorted.end());
  for (int i = 0; i < n; ++i)
    if (static_cast<int>(sorted.size()) != n || sorted[static_cast<size_t>(i)] != i)
      throw Error(where, "the member order is no permutation of the EP group's " +
                             std::to_string(n) + " members");
  HybridLayout out;
  out.domain_size = domain_size;
  out.position = static_cast<int>(std::find(order.begin(), order.end(), ep_index) - order.begin());
  out.offset = out.position % domain_size;
  const int first = out.position - out.offset;
  for (int j = 0; j < domain_size; ++j) out.domain.push_back(ep[order[first + j]]);
  for (int d = 0; d < n / domain_size; ++d)
    out.peers.push_back(ep[order[d * domain_size + out.offset]]);
  return out;
}

std::vector<CommKey> hybrid_comm_keys(const core::ParallelConfig& parallel, int domain_size,
                                      const std::vector<int>& order, int channel) {
  std::vector<CommKey> keys;
  for (const core::RankGroup& ep : core::build_rank_groups(parallel).ep) {
    for (int i = 0; i < static_cast<int>(ep.size()); ++i) {
      const HybridLayout h = hybrid_layout(ep, i, domain_size, order, "hybrid_domain");
      keys.push_back({h.domain, channel, "hybrid domain"});  // the pool merges duplicates
      keys.push_back({h.peers, 0, "hybrid peers"});
    }
    keys.push_back({ep, channel, "ep"});
  }
  return keys;
}

struct HybridExperts::Layer {
  std::vector<std::vector<nn::Param>> slots;  // the domain's S L experts, member-major
  std::vector<int64_t> numel, start;          // per tensor of one expert: size, flat offset
  std::vector<int64_t> kept;                  // per tensor, when compressed
  int64_t floats = 0;                         // parameters of one expert
  int64_t wire = 0;                           // bytes of one expert on the wire
  std::vector<float> shared;                  // the shared expert, flat (compressed, w/ S)
  std::vector<float> shared_sum;              // its next value x E, written on the stream
  std::vector<std::byte> send, recv;
  std::vector<std::vector<float>> received;  // per slot, flat: R, with feedback
  std::vector<float> scratch;                // s + R of one tensor
  std::vector<float> decoded;                // the owner's decode of its own bytes (feedback)
  std::shared_future<void> gathered, returned;
};

namespace {

std::vector<float> flat_values(const std::vector<nn::Param>& expert) {
  std::vector<float> out;
  for (const nn::Param& p : expert)
    out.insert(out.end(), p.value->data(), p.value->data() + p.value->size());
  return out;
}

void wait(const std::shared_future<void>& f) {
  if (f.valid()) f.get();  // rethrows the stream's failure
}

}  // namespace

HybridExperts::HybridExperts(std::vector<nn::MoeLayer*> layers, int owned_first, int owned,
                             const Comm& domain, const Comm& ep, const HybridConfig& config)
    : owned_first_(owned_first), owned_(owned), domain_(domain), ep_(ep), config_(config) {
  const bool compressed = config.compression < 1.0;
  for (nn::MoeLayer* moe : layers) {
    auto layer = std::make_unique<Layer>();
    if (moe->local_experts() != domain.size() * owned)
      throw std::logic_error("hybrid experts: a layer holds " +
                             std::to_string(moe->local_experts()) +
                             " experts, not S L = " + std::to_string(domain.size() * owned));
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
    layer->recv.resize(layer->send.size() * static_cast<size_t>(domain.size()));
    if (compressed && config.feedback)
      layer->received.assign(layer->slots.size(),
                             std::vector<float>(static_cast<size_t>(layer->floats), 0.0f));
    layers_.push_back(std::move(layer));
  }
  if (compressed && config.shared_expert) {  // HybridEP: "initialized by averaging all experts"
    for (size_t l = 0; l < layers_.size(); ++l) {
      layers_[l]->shared_sum.resize(static_cast<size_t>(layers_[l]->floats));
      sum_shared(*layers_[l], static_cast<int>(l), nullptr);
    }
  }
  stream_ = std::make_unique<CopyStream>();
}

HybridExperts::~HybridExperts() = default;

int64_t HybridExperts::encoded_bytes_per_expert() const {
  return layers_.empty() ? 0 : layers_.front()->wire;
}

CallOptions HybridExperts::call(const std::string& label, int layer) const {
  CallOptions c = config_.call;
  c.label = label + " [layer " + std::to_string(layer) + "]";
  return c;
}

// What an expert's tensor is encoded against: the shared expert (empty w/o S), plus with
// feedback the residual its receivers hold.
std::span<const float> HybridExperts::reference(Layer& layer, size_t slot, size_t tensor) {
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
void HybridExperts::keep_residual(Layer& layer, size_t slot, size_t tensor,
                                  std::span<const float> copy) {
  const size_t at = static_cast<size_t>(layer.start[tensor]);
  float* r = layer.received[slot].data() + at;
  for (size_t i = 0; i < copy.size(); ++i)
    r[i] = copy[i] - (layer.shared.empty() ? 0.0f : layer.shared[at + i]);
}

void HybridExperts::encode(Layer& layer) {
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
}

void HybridExperts::decode(Layer& layer) {
  const int me = domain_.rank();
  const std::byte* in = layer.recv.data();
  for (int m = 0; m < domain_.size(); ++m) {
    for (int j = m * owned_; j < (m + 1) * owned_; ++j) {
      for (size_t t = 0; t < layer.numel.size(); ++t) {
        const nn::Param& p = layer.slots[static_cast<size_t>(j)][t];
        const std::span<float> w(p.value->data(), static_cast<size_t>(layer.numel[t]));
        const int64_t bytes = config_.compression >= 1.0 ? static_cast<int64_t>(w.size_bytes())
                                                         : nn::sr_encoded_bytes(layer.kept[t]);
        if (m != me && config_.compression >= 1.0) {
          std::memcpy(w.data(), in, w.size_bytes());
        } else if (m != me) {  // HybridEP: SRDecode (the owner keeps its exact weights)
          nn::sr_decode(std::span<const std::byte>(in, static_cast<size_t>(bytes)),
                        reference(layer, static_cast<size_t>(j), t), w);
          if (config_.feedback) keep_residual(layer, static_cast<size_t>(j), t, w);
        }
        in += bytes;
      }
    }
  }
}

void HybridExperts::start_iteration() {
  for (size_t l = 0; l < layers_.size(); ++l) {
    Layer& layer = *layers_[l];
    wait(layer.returned);  // the last backward's shared expert sum
    if (!layer.shared_sum.empty()) {
      layer.shared.resize(layer.shared_sum.size());
      const float inv = 1.0f / static_cast<float>(config_.experts);
      for (size_t i = 0; i < layer.shared.size(); ++i) layer.shared[i] = layer.shared_sum[i] * inv;
    }
    encode(layer);  // the send queue, right after the optimizer step
  }
  for (size_t l = 0; l < layers_.size(); ++l) {
    Layer& layer = *layers_[l];
    layer.gathered = stream_->enqueue([this, &layer, l] {
      CallOptions c = call("moe.hybrid.expert_allgather", static_cast<int>(l));
      c.bytes = &bytes_;
      ring_all_gather(domain_, layer.send, layer.recv, c);  // as the simulator's AllGather
    });
  }
}

void HybridExperts::receive(int l) {
  Layer& layer = *layers_.at(static_cast<size_t>(l));
  // Once per step: a second decode would add the step's residual to R twice (feedback).
  if (!layer.gathered.valid())
    throw std::logic_error("hybrid experts: layer " + std::to_string(l) +
                           " received twice in one step");
  wait(layer.gathered);
  layer.gathered = {};
  decode(layer);
}

void HybridExperts::return_grads(int l) {
  Layer& layer = *layers_.at(static_cast<size_t>(l));
  layer.returned = stream_->enqueue([this, &layer, l] {
    std::vector<float> grads;  // every slot's gradient, member-major: block m goes to member m
    grads.reserve(static_cast<size_t>(layer.floats) * layer.slots.size());
    for (const std::vector<nn::Param>& expert : layer.slots)
      for (const nn::Param& p : expert)
        grads.insert(grads.end(), p.grad->data(), p.grad->data() + p.grad->size());
    CallOptions c = call("moe.hybrid.grad_reducescatter", l);
    c.bytes = &bytes_;
    const std::vector<float> mine = ring_reduce_scatter_sum(domain_, grads, c);
    const float* in = mine.data();
    for (size_t j = 0; j < layer.slots.size(); ++j) {
      const bool own =
          static_cast<int>(j) >= owned_first_ && static_cast<int>(j) < owned_first_ + owned_;
      for (const nn::Param& p : layer.slots[j]) {
        if (own) {
          std::copy(in, in + p.grad->size(), p.grad->data());
          in += p.grad->size();
        } else {
          p.grad->fill(0.0f);  // a copy's gradient lives one backward
        }
      }
    }
    if (!layer.shared_sum.empty()) sum_shared(layer, l, &bytes_);
  });
}

// The sum of the layer's E experts, over the EP group: each member adds its own.
void HybridExperts::sum_shared(Layer& layer, int l, LinkBytes* bytes) {
  std::fill(layer.shared_sum.begin(), layer.shared_sum.end(), 0.0f);
  for (int j = owned_first_; j < owned_first_ + owned_; ++j) {
    const std::vector<float> w = flat_values(layer.slots[static_cast<size_t>(j)]);
    for (size_t i = 0; i < w.size(); ++i) layer.shared_sum[i] += w[i];
  }
  CallOptions c = call("moe.hybrid.shared_allreduce", l);
  c.bytes = bytes;
  all_reduce_sum(ep_, layer.shared_sum, c);
}

void HybridExperts::wait_grads(int l) {
  wait(layers_.at(static_cast<size_t>(l))->returned);
}

void HybridExperts::finish() {
  for (const auto& layer : layers_) wait(layer->returned);
}

}  // namespace moecomm::rt
