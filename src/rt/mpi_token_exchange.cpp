#include "rt/mpi_token_exchange.h"

#include <numeric>
#include <span>

#include "core/error.h"
#include "nn/bf16.h"
#include "nn/exchange_permute.h"
#include "rt/collectives.h"
#include "sched/op_role.h"

namespace moecomm::rt {

namespace {

// Rows per member from per-(member, local expert) counts [P * L].
std::vector<int64_t> rows_per_member(const std::vector<int>& counts, int members) {
  const size_t per = counts.size() / static_cast<size_t>(members);
  std::vector<int64_t> rows(static_cast<size_t>(members), 0);
  for (size_t i = 0; i < counts.size(); ++i) rows[i / per] += counts[i];
  return rows;
}

std::vector<int64_t> times(std::vector<int64_t> rows, int64_t cols) {
  for (int64_t& r : rows) r *= cols;
  return rows;
}

}  // namespace

MpiTokenExchange::MpiTokenExchange(const Comm& ep, CallOptions options, sched::Algorithm algorithm,
                                   bool bf16)
    : ep_(ep), options_(std::move(options)), algorithm_(algorithm), bf16_(bf16) {}

nn::ExchangeLayout MpiTokenExchange::exchange_counts(const std::vector<int>& send_counts) {
  const int p = ranks();
  if (send_counts.empty() || send_counts.size() % static_cast<size_t>(p) != 0) {
    throw Error("token exchange", std::to_string(send_counts.size()) +
                                      " expert counts do not split over " + std::to_string(p) +
                                      " EP ranks");
  }
  const int l = static_cast<int>(send_counts.size()) / p;
  CallOptions o = options_;
  o.label = "moe.dispatch.counts";
  o.bytes = nullptr;
  // Every member sends every other its L counts: the receive counts are known, one round.
  const std::vector<int64_t> per_member(static_cast<size_t>(p), l);
  const Received<int> got =
      all_to_all_v(ep_, std::span<const int>(send_counts), std::span<const int64_t>(per_member),
                   sched::Algorithm::kFlat, o, std::span<const int64_t>(per_member));
  nn::ExchangeLayout layout;
  layout.ranks = p;
  layout.local_experts = l;
  layout.send_counts = send_counts;
  layout.recv_counts = got.data;  // source-major: [src * L + l]
  return layout;
}

nn::Tensor MpiTokenExchange::exchange_rows(const nn::Tensor& send, const std::vector<int64_t>& rows,
                                           const std::vector<int64_t>& recv_rows,
                                           std::string_view label) {
  const int64_t cols = send.cols();
  const std::vector<int64_t> floats = times(rows, cols), recv_floats = times(recv_rows, cols);
  CallOptions o = options_;
  o.label = label;
  o.bytes = &bytes_;
  if (bf16_) {
    const std::vector<uint16_t> half = nn::to_bf16(send);
    const Received<uint16_t> got =
        all_to_all_v(ep_, std::span<const uint16_t>(half), std::span<const int64_t>(floats),
                     algorithm_, o, std::span<const int64_t>(recv_floats));
    nn::Tensor out({static_cast<int64_t>(got.data.size()) / std::max<int64_t>(cols, 1), cols});
    nn::from_bf16(got.data, out);
    return out;
  }
  const Received<float> got = all_to_all_v(
      ep_, std::span<const float>(send.data(), static_cast<size_t>(send.size())),
      std::span<const int64_t>(floats), algorithm_, o, std::span<const int64_t>(recv_floats));
  const int64_t total = std::accumulate(got.counts.begin(), got.counts.end(), int64_t{0});
  return nn::Tensor({total / std::max<int64_t>(cols, 1), cols}, got.data);
}

nn::Tensor MpiTokenExchange::dispatch(const nn::Tensor& send, const nn::ExchangeLayout& layout) {
  if (send.rows() != layout.send_rows()) throw Error("dispatch", "rows differ from counts");
  const nn::Tensor source_major = exchange_rows(send, rows_per_member(layout.send_counts, ranks()),
                                                rows_per_member(layout.recv_counts, ranks()),
                                                sched::to_string(sched::OpRole::kDispatchA2A));
  return nn::source_to_expert_major(source_major, layout);
}

nn::Tensor MpiTokenExchange::combine(const nn::Tensor& expert_rows,
                                     const nn::ExchangeLayout& layout) {
  if (expert_rows.rows() != layout.recv_rows()) throw Error("combine", "rows differ from counts");
  return exchange_rows(
      nn::expert_to_source_major(expert_rows, layout), rows_per_member(layout.recv_counts, ranks()),
      rows_per_member(layout.send_counts, ranks()), sched::to_string(sched::OpRole::kCombineA2A));
}

}  // namespace moecomm::rt
