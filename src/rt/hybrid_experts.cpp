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

struct HybridExperts::Pending {
  std::vector<std::byte> recv;
  std::shared_future<void> gathered, returned;
};

namespace {

void wait(const std::shared_future<void>& f) {
  if (f.valid()) f.get();  // rethrows the stream's failure
}

}  // namespace

HybridExperts::HybridExperts(std::vector<nn::MoeLayer*> layers, int owned_first, int owned,
                             const Comm& domain, const Comm& ep, const HybridConfig& config)
    : codec_(layers, owned_first, owned, domain.size(), domain.rank(),
             {config.compression, config.shared_expert, config.experts, config.feedback}),
      domain_(domain),
      ep_(ep),
      config_(config) {
  for (size_t l = 0; l < layers.size(); ++l) pending_.push_back(std::make_unique<Pending>());
  // HybridEP: the shared expert is "initialized by averaging all experts".
  if (codec_.shares())
    for (int l = 0; l < codec_.layers(); ++l) sum_shared(l, nullptr);
  stream_ = std::make_unique<CopyStream>();
}

HybridExperts::~HybridExperts() = default;

int64_t HybridExperts::encoded_bytes_per_expert() const {
  return codec_.wire_bytes_per_expert();
}

CallOptions HybridExperts::call(const std::string& label, int layer) const {
  CallOptions c = config_.call;
  c.label = label + " [layer " + std::to_string(layer) + "]";
  return c;
}

void HybridExperts::start_iteration() {
  for (int l = 0; l < codec_.layers(); ++l) {
    wait(pending_[size_t(l)]->returned);  // the last backward's shared expert sum
    codec_.refresh_shared(l);
    codec_.encode(l);  // the send queue, right after the optimizer step
  }
  for (int l = 0; l < codec_.layers(); ++l) {
    Pending& p = *pending_[size_t(l)];
    p.gathered = stream_->enqueue([this, &p, l] {
      const std::vector<std::byte>& send = codec_.encode_buffer(l);
      p.recv.resize(send.size() * size_t(domain_.size()));
      CallOptions c = call("moe.hybrid.expert_allgather", l);
      c.bytes = &bytes_;
      ring_all_gather(domain_, send, p.recv, c);  // as the simulator's AllGather
    });
  }
}

void HybridExperts::receive(int l) {
  Pending& p = *pending_.at(static_cast<size_t>(l));
  // Once per step: a second decode would add the step's residual to R twice (feedback).
  if (!p.gathered.valid())
    throw std::logic_error("hybrid experts: layer " + std::to_string(l) +
                           " received twice in one step");
  wait(p.gathered);
  p.gathered = {};
  codec_.decode(l, p.recv);
}

void HybridExperts::return_grads(int l) {
  Pending& p = *pending_.at(static_cast<size_t>(l));
  p.returned = stream_->enqueue([this, l] {
    CallOptions c = call("moe.hybrid.grad_reducescatter", l);
    c.bytes = &bytes_;
    codec_.take_grads(l, ring_reduce_scatter_sum(domain_, codec_.slot_grads(l), c));
    if (codec_.shares()) sum_shared(l, &bytes_);
  });
}

// The sum of the layer's E experts, over the EP group: each member adds its own.
void HybridExperts::sum_shared(int l, LinkBytes* bytes) {
  std::vector<float> sum = codec_.own_sum(l);
  CallOptions c = call("moe.hybrid.shared_allreduce", l);
  c.bytes = bytes;
  all_reduce_sum(ep_, sum, c);
  codec_.set_shared_sum(l, sum);
}

void HybridExperts::wait_grads(int l) {
  wait(pending_.at(static_cast<size_t>(l))->returned);
}

void HybridExperts::finish() {
  for (const auto& p : pending_) wait(p->returned);
}

}  // namespace moecomm::rt
