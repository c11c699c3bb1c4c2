#pragma once
// The chunks of a pipelined MoE token path (MoNTA O2's N, FSMoE's r, Lina's A2A/FFN
// micro-ops): chunk i of n takes, from every block of rows, the contiguous sub-block
//   [floor(rows * i / n), floor(rows * (i + 1) / n))
// so a sender and its receiver derive the same chunk sizes from the same full count, and the
// union of the chunks is the full buffer in its original order: chunking changes when rows
// travel, never which rows an expert sees or how its outputs are combined.
//
// Blocks are the send layout's per-expert blocks (send_counts[e]) on the sending side and
// the dispatched layout's (src, l) blocks on the expert side (token_exchange.h).
#include <vector>

#include "nn/token_exchange.h"

namespace moecomm::nn {

// Rows of chunk i of n of a block of `rows` rows, and the chunk's first row in the block.
int chunk_rows(int rows, int i, int n);
int chunk_first(int rows, int i, int n);

// The layout of chunk i alone: every send and recv count replaced by its chunk.
ExchangeLayout chunk_layout(const ExchangeLayout& layout, int i, int n);

// Send side (expert-major over E): the rows of chunk i in the send buffer, in the order they
// are sent; and chunk i's rows themselves, in chunk_layout's send layout, and back.
std::vector<int> send_chunk_rows(const ExchangeLayout& layout, int i, int n);
Tensor take_send_chunk(const Tensor& send, const ExchangeLayout& layout, int i, int n);
void put_send_chunk(Tensor& send, const Tensor& chunk, const ExchangeLayout& layout, int i, int n);

// Expert side (local-expert-major [l][src]): for each row of chunk i's dispatched buffer (in
// chunk_layout's local-expert-major order), its row in the full dispatched buffer.
std::vector<int> recv_chunk_rows(const ExchangeLayout& layout, int i, int n);

// Rows `index` of m, in that order, and the reverse (m[index[r]] = rows[r]).
Tensor gather_rows(const Tensor& m, const std::vector<int>& index);
void scatter_rows(Tensor& m, const Tensor& rows, const std::vector<int>& index);

}  // namespace moecomm::nn
