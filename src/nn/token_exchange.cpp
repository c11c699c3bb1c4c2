#include "nn/token_exchange.h"

#include <numeric>

namespace moecomm::nn {

int ExchangeLayout::send_rows() const {
  return std::accumulate(send_counts.begin(), send_counts.end(), 0);
}

int ExchangeLayout::recv_rows() const {
  return std::accumulate(recv_counts.begin(), recv_counts.end(), 0);
}

int ExchangeLayout::local_rows(int l) const {
  int n = 0;
  for (int src = 0; src < ranks; ++src)
    n += recv_counts[static_cast<size_t>(src * local_experts + l)];
  return n;
}

int ExchangeLayout::local_offset(int l) const {
  int n = 0;
  for (int j = 0; j < l; ++j) n += local_rows(j);
  return n;
}

}  // namespace moecomm::nn
