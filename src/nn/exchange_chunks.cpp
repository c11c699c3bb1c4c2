#include "nn/exchange_chunks.h"

#include <string>

#include "core/error.h"

namespace moecomm::nn {
namespace {

void check_chunk(int i, int n) {
  if (n < 1 || i < 0 || i >= n)
    throw Error("exchange chunks",
                "chunk " + std::to_string(i) + " of " + std::to_string(n) + " does not exist");
}

}  // namespace

int chunk_first(int rows, int i, int n) {
  check_chunk(i, n);
  return static_cast<int>(static_cast<int64_t>(rows) * i / n);
}

int chunk_rows(int rows, int i, int n) {
  check_chunk(i, n);
  return static_cast<int>(static_cast<int64_t>(rows) * (i + 1) / n -
                          static_cast<int64_t>(rows) * i / n);
}

ExchangeLayout chunk_layout(const ExchangeLayout& layout, int i, int n) {
  ExchangeLayout c = layout;
  for (int& v : c.send_counts) v = chunk_rows(v, i, n);
  for (int& v : c.recv_counts) v = chunk_rows(v, i, n);
  return c;
}

std::vector<int> send_chunk_rows(const ExchangeLayout& layout, int i, int n) {
  std::vector<int> index;
  int at = 0;
  for (int rows : layout.send_counts) {
    const int first = at + chunk_first(rows, i, n);
    for (int r = 0; r < chunk_rows(rows, i, n); ++r) index.push_back(first + r);
    at += rows;
  }
  return index;
}

Tensor take_send_chunk(const Tensor& send, const ExchangeLayout& layout, int i, int n) {
  return gather_rows(send, send_chunk_rows(layout, i, n));
}

void put_send_chunk(Tensor& send, const Tensor& chunk, const ExchangeLayout& layout, int i, int n) {
  scatter_rows(send, chunk, send_chunk_rows(layout, i, n));
}

std::vector<int> recv_chunk_rows(const ExchangeLayout& layout, int i, int n) {
  std::vector<int> index;
  int at = 0;  // the (src, l) block's first row in the full local-expert-major buffer
  for (int l = 0; l < layout.local_experts; ++l)
    for (int src = 0; src < layout.ranks; ++src) {
      const int rows = layout.recv_counts[static_cast<size_t>(src * layout.local_experts + l)];
      const int first = at + chunk_first(rows, i, n);
      for (int r = 0; r < chunk_rows(rows, i, n); ++r) index.push_back(first + r);
      at += rows;
    }
  return index;
}

Tensor gather_rows(const Tensor& m, const std::vector<int>& index) {
  const int64_t cols = m.cols();
  Tensor out({static_cast<int64_t>(index.size()), cols});
  for (size_t r = 0; r < index.size(); ++r) {
    if (index[r] < 0 || index[r] >= m.rows())
      throw Error("gather rows", "row " + std::to_string(index[r]) + " of " +
                                     std::to_string(m.rows()) + " does not exist");
    std::copy_n(m.row(index[r]), cols, out.row(static_cast<int64_t>(r)));
  }
  return out;
}

void scatter_rows(Tensor& m, const Tensor& rows, const std::vector<int>& index) {
  if (rows.rows() != static_cast<int64_t>(index.size()) ||
      (rows.rows() > 0 && rows.cols() != m.cols()))
    throw Error("scatter rows", "got " + std::to_string(rows.rows()) + " rows for " +
                                    std::to_string(index.size()) + " indices");
  const int64_t cols = m.cols();
  for (size_t r = 0; r < index.size(); ++r) {
    if (index[r] < 0 || index[r] >= m.rows())
      throw Error("scatter rows", "row " + std::to_string(index[r]) + " of " +
                                      std::to_string(m.rows()) + " does not exist");
    std::copy_n(rows.row(static_cast<int64_t>(r)), cols, m.row(index[r]));
  }
}

}  // namespace moecomm::nn
