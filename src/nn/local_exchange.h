#pragma once
// The single-process TokenExchange: one rank holds all E experts, so dispatch and combine
// are the identity (copies) and recv_counts = send_counts.
#include "nn/token_exchange.h"

namespace moecomm::nn {

class LocalExchange : public TokenExchange {
 public:
  int ranks() const override { return 1; }
  int rank() const override { return 0; }
  ExchangeLayout exchange_counts(const std::vector<int>& send_counts) override;
  Tensor dispatch(const Tensor& send, const ExchangeLayout& layout) override;
  Tensor combine(const Tensor& expert_rows, const ExchangeLayout& layout) override;
};

}  // namespace moecomm::nn
