#include "nn/token_exchange.h"

#include <numeric>

#include "nn/exchange_chunks.h"

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

// Chunk by chunk: dispatch, experts, combine; the combined chunks land where the full
// combine would put them (exchange_chunks.h keeps every row's place).
Tensor TokenExchange::pipeline(const Tensor& send, const ExchangeLayout& layout, int chunks,
                               const ChunkExperts& experts) {
  Tensor combined(send.shape());
  for (int i = 0; i < chunks; ++i) {
    const ExchangeLayout cl = chunk_layout(layout, i, chunks);
    const Tensor rows = dispatch(take_send_chunk(send, layout, i, chunks), cl);
    put_send_chunk(combined, combine(experts(i, cl, rows), cl), layout, i, chunks);
  }
  return combined;
}

}  // namespace moecomm::nn
