#include "nn/exchange_permute.h"

#include <algorithm>

#include "core/error.h"

namespace moecomm::nn {
namespace {

// First row of block (src, l) in the source-major and in the expert-major layouts.
struct BlockStarts {
  std::vector<int> source_major, expert_major;  // index src * L + l
};

BlockStarts block_starts(const ExchangeLayout& layout) {
  const int P = layout.ranks, L = layout.local_experts;
  BlockStarts b{std::vector<int>(static_cast<size_t>(P * L)),
                std::vector<int>(static_cast<size_t>(P * L))};
  int row = 0;
  for (int src = 0; src < P; ++src)
    for (int l = 0; l < L; ++l) {
      b.source_major[static_cast<size_t>(src * L + l)] = row;
      row += layout.recv_counts[static_cast<size_t>(src * L + l)];
    }
  row = 0;
  for (int l = 0; l < L; ++l)
    for (int src = 0; src < P; ++src) {
      b.expert_major[static_cast<size_t>(src * L + l)] = row;
      row += layout.recv_counts[static_cast<size_t>(src * L + l)];
    }
  return b;
}

Tensor permute(const Tensor& rows, const ExchangeLayout& layout, bool to_expert_major) {
  if (rows.rows() != layout.recv_rows())
    throw Error("exchange permute", "rows differ from the layout's receive count");
  const BlockStarts b = block_starts(layout);
  const std::vector<int>& from = to_expert_major ? b.source_major : b.expert_major;
  const std::vector<int>& to = to_expert_major ? b.expert_major : b.source_major;
  Tensor out(rows.shape());
  const int64_t m = rows.cols();
  for (size_t i = 0; i < layout.recv_counts.size(); ++i)
    std::copy(rows.row(from[i]), rows.row(from[i]) + layout.recv_counts[i] * m, out.row(to[i]));
  return out;
}

}  // namespace

Tensor source_to_expert_major(const Tensor& rows, const ExchangeLayout& layout) {
  return permute(rows, layout, true);
}

Tensor expert_to_source_major(const Tensor& rows, const ExchangeLayout& layout) {
  return permute(rows, layout, false);
}

}  // namespace moecomm::nn
