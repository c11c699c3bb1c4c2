#include "nn/sample_moving_rows.h"

#include "nn/exchange_chunks.h"

namespace moecomm::nn {
namespace {

// Calls f(block, first canonical row, rows) for the expert side's (src, l) blocks in
// canonical order; block = src * L + l.
template <class F>
void for_recv_blocks(const ExchangeLayout& layout, F f) {
  int at = 0;
  for (int src = 0; src < layout.ranks; ++src)
    for (int l = 0; l < layout.local_experts; ++l) {
      const int b = src * layout.local_experts + l,
                rows = layout.recv_counts[static_cast<size_t>(b)];
      f(b, at, rows);
      at += rows;
    }
}

}  // namespace

std::vector<int> chunk_member_rows(const ExchangeLayout& layout, int i, int n, bool recv) {
  const std::vector<int>& counts = recv ? layout.recv_counts : layout.send_counts;
  std::vector<int> out(static_cast<size_t>(layout.ranks), 0);
  for (size_t b = 0; b < counts.size(); ++b)
    out[b / static_cast<size_t>(layout.local_experts)] += chunk_rows(counts[b], i, n);
  return out;
}

std::vector<int> recv_chunk_canonical(const ExchangeLayout& layout, int i, int n) {
  std::vector<int> index;
  for_recv_blocks(layout, [&](int, int at, int rows) {
    const int first = at + chunk_first(rows, i, n);
    for (int r = 0; r < chunk_rows(rows, i, n); ++r) index.push_back(first + r);
  });
  return index;
}

std::vector<int> canonical_experts(const ExchangeLayout& layout) {
  std::vector<int> out;
  for_recv_blocks(layout, [&](int b, int, int rows) {
    out.insert(out.end(), static_cast<size_t>(rows), b % layout.local_experts);
  });
  return out;
}

std::vector<int> canonical_chunks(const ExchangeLayout& layout, int n) {
  std::vector<int> out;
  for_recv_blocks(layout, [&](int, int, int rows) {
    for (int j = 0; j < n; ++j)
      out.insert(out.end(), static_cast<size_t>(chunk_rows(rows, j, n)), j);
  });
  return out;
}

std::vector<int> gather_ints(const std::vector<int>& v, int width, const std::vector<int>& index) {
  std::vector<int> out;
  out.reserve(index.size() * static_cast<size_t>(width));
  for (int r : index)
    out.insert(out.end(), v.begin() + static_cast<int64_t>(r) * width,
               v.begin() + static_cast<int64_t>(r + 1) * width);
  return out;
}

}  // namespace moecomm::nn
