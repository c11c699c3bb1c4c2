#include "nn/local_exchange.h"

#include "core/error.h"

namespace moecomm::nn {

ExchangeLayout LocalExchange::exchange_counts(const std::vector<int>& send_counts) {
  ExchangeLayout layout;
  layout.ranks = 1;
  layout.local_experts = static_cast<int>(send_counts.size());
  layout.send_counts = send_counts;
  layout.recv_counts = send_counts;
  return layout;
}

Tensor LocalExchange::dispatch(const Tensor& send, const ExchangeLayout& layout) {
  if (send.rows() != layout.send_rows()) throw Error("local dispatch", "rows differ from counts");
  return send;
}

Tensor LocalExchange::combine(const Tensor& expert_rows, const ExchangeLayout& layout) {
  if (expert_rows.rows() != layout.recv_rows())
    throw Error("local combine", "rows differ from counts");
  return expert_rows;
}

}  // namespace moecomm::nn
