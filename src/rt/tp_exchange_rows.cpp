#include "rt/tp_exchange_rows.h"

#include <algorithm>
#include <string>

#include "core/error.h"
#include "nn/exchange_chunks.h"

namespace moecomm::rt {

RowRange piece_of(int rows, int part, int chunk, const PieceSplit& split) {
  const int part_rows = nn::chunk_rows(rows, part, split.parts);
  return {
      nn::chunk_first(rows, part, split.parts) + nn::chunk_first(part_rows, chunk, split.chunks),
      nn::chunk_rows(part_rows, chunk, split.chunks)};
}

Blocks send_blocks(const nn::ExchangeLayout& layout) {
  Blocks b{layout.send_counts, {}};
  int at = 0;
  for (int rows : layout.send_counts) {
    b.first.push_back(at);
    at += rows;
  }
  return b;
}

Blocks recv_blocks(const nn::ExchangeLayout& layout) {
  const int p = layout.ranks, l_count = layout.local_experts;
  Blocks b{layout.recv_counts, std::vector<int>(layout.recv_counts.size())};
  int at = 0;  // local-expert-major: blocks [l][src]
  for (int l = 0; l < l_count; ++l)
    for (int src = 0; src < p; ++src) {
      const size_t k = static_cast<size_t>(src * l_count + l);
      b.first[k] = at;
      at += layout.recv_counts[k];
    }
  return b;
}

std::vector<int> piece_rows(const Blocks& blocks, int part, int chunk, const PieceSplit& split) {
  std::vector<int> out;
  for (size_t k = 0; k < blocks.rows.size(); ++k) {
    const RowRange r = piece_of(blocks.rows[k], part, chunk, split);
    for (int j = 0; j < r.rows; ++j) out.push_back(blocks.first[k] + r.first + j);
  }
  return out;
}

std::vector<int64_t> member_rows(const Blocks& blocks, int per_member, int part, int chunk,
                                 const PieceSplit& split) {
  std::vector<int64_t> out(blocks.rows.size() / static_cast<size_t>(per_member), 0);
  for (size_t k = 0; k < blocks.rows.size(); ++k)
    out[k / static_cast<size_t>(per_member)] += piece_of(blocks.rows[k], part, chunk, split).rows;
  return out;
}

PartRows all_part_rows(const Blocks& blocks, int chunk, const PieceSplit& split) {
  PartRows out;
  for (int u = 0; u < split.parts; ++u) {
    const std::vector<int> rows = piece_rows(blocks, u, chunk, split);
    out.rows.insert(out.rows.end(), rows.begin(), rows.end());
    out.per_part.push_back(static_cast<int64_t>(rows.size()));
  }
  return out;
}

std::vector<float> gather_floats(const nn::Tensor& m, const std::vector<int>& rows) {
  const int64_t cols = m.cols();
  std::vector<float> out(rows.size() * static_cast<size_t>(cols));
  for (size_t r = 0; r < rows.size(); ++r)
    std::copy_n(m.row(rows[r]), cols, out.data() + r * static_cast<size_t>(cols));
  return out;
}

void scatter_floats(nn::Tensor& m, std::span<const float> data, const std::vector<int>& rows) {
  const int64_t cols = m.cols();
  if (data.size() != rows.size() * static_cast<size_t>(cols))
    throw Error("tp token exchange", "received " + std::to_string(data.size()) + " floats for " +
                                         std::to_string(rows.size()) + " rows");
  for (size_t r = 0; r < rows.size(); ++r)
    std::copy_n(data.data() + r * static_cast<size_t>(cols), cols, m.row(rows[r]));
}

std::vector<int64_t> times(std::vector<int64_t> rows, int64_t cols) {
  for (int64_t& r : rows) r *= cols;
  return rows;
}

}  // namespace moecomm::rt
