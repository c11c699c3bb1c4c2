#include "rt/replicated_moe.h"

#include <algorithm>
#include <numeric>
#include <span>
#include <string>

#include "core/error.h"
#include "nn/capacity_order.h"
#include "nn/dropless_order.h"
#include "nn/exchange_chunks.h"
#include "nn/iorder.h"
#include "rt/collectives.h"

namespace moecomm::rt {

namespace {

std::unique_ptr<nn::Order> make_order(const nn::MoeLayerSpec& spec) {
  if (spec.capacity_factor < 0.0f) throw Error("replicated moe", "capacity_factor must be >= 0");
  if (spec.capacity_factor > 0.0f) return std::make_unique<nn::CapacityOrder>(spec.capacity_factor);
  return std::make_unique<nn::DroplessOrder>();
}

const nn::MoeLayerSpec& checked(const nn::MoeLayerSpec& spec) {
  if (spec.experts <= 0 || spec.hidden <= 0 || spec.ffn_hidden <= 0)
    throw Error("replicated moe", "hidden, ffn_hidden and experts must be positive");
  if (spec.expert_shard.count != 1)
    throw Error("replicated moe", "expert sharding is not supported for inference replication");
  return spec;
}

}  // namespace

ReplicatedMoeLayer::ReplicatedMoeLayer(const nn::MoeLayerSpec& spec, const Comm& ep,
                                       CallOptions options, int max_experts_per_device,
                                       sched::Algorithm algorithm)
    : gate_(nn::make_gate(checked(spec))),
      order_(make_order(spec)),
      ep_(ep),
      options_(std::move(options)),
      algorithm_(algorithm),
      experts_(spec.experts),
      max_per_device_(max_experts_per_device),
      swapper_(spec.ffn_type, spec.hidden, spec.ffn_hidden, spec.seed, spec.experts,
               max_experts_per_device) {}

void ReplicatedMoeLayer::set_plan(ReplicaPlan plan) {
  validate_replica_plan(plan, experts_, ep_.size(), max_per_device_);
  resident_ = experts_on(plan, ep_.rank());
  swapper_.swap_in(resident_);  // Sec. 6.2: "Devices then swap in the expert weights"
  fingerprint_ = plan_fingerprint(plan);
  plan_ = std::move(plan);
}

CallOptions ReplicatedMoeLayer::call(const char* label, LinkBytes* bytes) const {
  CallOptions o = options_;
  o.label = label;
  o.bytes = bytes;
  return o;
}

std::vector<ReplicatedMoeLayer::Block> ReplicatedMoeLayer::send_blocks() const {
  std::vector<Block> blocks;
  for (int e = 0; e < experts_; ++e) {
    const std::vector<int>& devices = plan_[static_cast<size_t>(e)];
    const std::vector<int> sizes = split_rows(order_plan_.counts[static_cast<size_t>(e)],
                                              static_cast<int>(devices.size()), ep_.rank());
    int first = order_plan_.offsets[static_cast<size_t>(e)];
    for (size_t i = 0; i < devices.size(); ++i) {
      if (sizes[i] > 0) blocks.push_back({devices[i], e, first, sizes[i]});
      first += sizes[i];
    }
  }
  std::stable_sort(blocks.begin(), blocks.end(),
                   [](const Block& a, const Block& b) { return a.rank < b.rank; });
  return blocks;
}

// One A2A-v of ints, per destination [fingerprint, (expert, rows)...] (the header comment).
std::vector<ReplicatedMoeLayer::Block> ReplicatedMoeLayer::exchange_metadata(
    const std::vector<Block>& send) {
  const int p = ep_.size();
  std::vector<int> meta;
  std::vector<int64_t> per_rank(static_cast<size_t>(p), 0);
  for (int d = 0; d < p; ++d) {
    meta.push_back(fingerprint_);
    for (const Block& b : send)
      if (b.rank == d) meta.insert(meta.end(), {b.expert, b.rows});
    per_rank[static_cast<size_t>(d)] =
        1 +
        2 * std::count_if(send.begin(), send.end(), [d](const Block& b) { return b.rank == d; });
  }
  const Received<int> got =
      all_to_all_v(ep_, std::span<const int>(meta), std::span<const int64_t>(per_rank),
                   sched::Algorithm::kFlat, call("moe.replicated.meta", &meta_bytes_));
  std::vector<Block> recv;
  size_t at = 0;
  int row = 0;
  for (int src = 0; src < p; ++src) {
    const size_t end = at + static_cast<size_t>(got.counts[static_cast<size_t>(src)]);
    if (got.data[at] != fingerprint_)
      throw Error("replicated moe", "rank " + std::to_string(ep_.global_rank(src)) +
                                        " runs another replication plan than rank " +
                                        std::to_string(ep_.my_global_rank()) +
                                        " (every rank must set the same plan)");
    for (at += 1; at + 1 < end; at += 2) {
      const Block b{src, got.data[at], row, got.data[at + 1]};
      if (!swapper_.resident(b.expert))
        throw Error("replicated moe", "got rows for expert " + std::to_string(b.expert) +
                                          ", which this rank does not host");
      recv.push_back(b);
      row += b.rows;
    }
    at = end;
  }
  return recv;
}

nn::Tensor ReplicatedMoeLayer::exchange_rows(const nn::Tensor& rows,
                                             const std::vector<int64_t>& per_rank,
                                             const char* label) {
  const int64_t cols = rows.cols();
  std::vector<int64_t> floats(per_rank.size());
  for (size_t j = 0; j < per_rank.size(); ++j) floats[j] = per_rank[j] * cols;
  const Received<float> got =
      all_to_all_v(ep_, std::span<const float>(rows.data(), static_cast<size_t>(rows.size())),
                   std::span<const int64_t>(floats), algorithm_, call(label, &bytes_));
  return nn::Tensor({static_cast<int64_t>(got.data.size()) / cols, cols}, got.data);
}

// Packed experts run one after another, each once over all its rows (every source).
nn::Tensor ReplicatedMoeLayer::run_experts(const nn::Tensor& recv,
                                           const std::vector<Block>& blocks) const {
  nn::Tensor out(recv.shape());
  for (int e : resident_) {
    std::vector<int> index;
    for (const Block& b : blocks)
      if (b.expert == e)
        for (int r = 0; r < b.rows; ++r) index.push_back(b.first + r);
    if (index.empty()) continue;
    nn::ExpertCache cache;
    nn::scatter_rows(out, swapper_.expert(e).forward(nn::gather_rows(recv, index), cache), index);
  }
  return out;
}

nn::Tensor ReplicatedMoeLayer::forward(const nn::Tensor& x) {
  if (plan_.empty()) throw Error("replicated moe", "forward needs a plan (set_plan)");
  routing_ = gate_->forward(x);  // Gate
  if (routing_.experts != experts_)
    throw Error("replicated moe", "gate routes to " + std::to_string(routing_.experts) +
                                      " experts, layer has " + std::to_string(experts_));
  return forward_ordered(x);
}

nn::Tensor ReplicatedMoeLayer::forward_routed(const nn::Tensor& x, const nn::GateOutput& routing) {
  if (plan_.empty()) throw Error("replicated moe", "forward needs a plan (set_plan)");
  if (routing.experts != experts_)
    throw Error("replicated moe", "given routing is over " + std::to_string(routing.experts) +
                                      " experts, layer has " + std::to_string(experts_));
  if (routing.expert_choice || routing.tokens != x.rows() || routing.per_group < 1 ||
      routing.slots() != routing.tokens * routing.per_group ||
      routing.expert.size() != routing.token.size() ||
      routing.weight.size() != routing.token.size())
    throw Error("replicated moe",
                "given routing must be token choice with per_group slots "
                "for each of the " +
                    std::to_string(x.rows()) + " tokens");
  for (int s = 0; s < routing.slots(); ++s) {
    const int t = routing.token[static_cast<size_t>(s)], e = routing.expert[static_cast<size_t>(s)];
    if (t < 0 || t >= routing.tokens || e < 0 || e >= experts_)
      throw Error("replicated moe", "given routing: slot " + std::to_string(s) + " names token " +
                                        std::to_string(t) + ", expert " + std::to_string(e) +
                                        " out of range");
  }
  routing_ = routing;
  return forward_ordered(x);
}

nn::Tensor ReplicatedMoeLayer::forward_ordered(const nn::Tensor& x) {
  order_plan_ = order_->plan(routing_);  // Order
  const nn::Tensor ordered = nn::order_rows(order_plan_, x);
  const std::vector<Block> send = send_blocks();
  const std::vector<Block> recv = exchange_metadata(send);
  const int p = ep_.size();
  std::vector<int> index;  // rows of `ordered` in send order (destination-major)
  std::vector<int64_t> to(static_cast<size_t>(p), 0), from(static_cast<size_t>(p), 0);
  for (const Block& b : send) {
    for (int r = 0; r < b.rows; ++r) index.push_back(b.first + r);
    to[static_cast<size_t>(b.rank)] += b.rows;
  }
  received_.assign(static_cast<size_t>(p * experts_), 0);
  for (const Block& b : recv) {
    from[static_cast<size_t>(b.rank)] += b.rows;
    received_[static_cast<size_t>(b.rank * experts_ + b.expert)] = b.rows;
  }
  const nn::Tensor got =
      exchange_rows(nn::gather_rows(ordered, index), to, "moe.replicated.dispatch");  // Dispatch
  const nn::Tensor out = run_experts(got, recv);                                      // Expert
  const nn::Tensor back = exchange_rows(out, from, "moe.replicated.combine");         // Combine
  nn::Tensor combined(ordered.shape());
  nn::scatter_rows(combined, back, index);
  return nn::iorder(order_plan_, combined);  // I-Order
}

}  // namespace moecomm::rt
