#pragma once
// Row bookkeeping of the moving MoE sublayer (sample_moving_moe.h) over the scatter's layout
// (token_exchange.h ExchangeLayout: send [E], recv [src * L + l]) and its chunks
// (exchange_chunks.h: chunk i of n takes a contiguous sub-block of every block).
//   * send side: the expert-major send buffer (the Order module's rows);
//   * expert side: the canonical order, source-major and local-expert-major within a source,
//     which is the A2A-v order of the unchunked scatter.
#include <vector>

#include "nn/token_exchange.h"

namespace moecomm::nn {

// Rows per member of chunk i of n: sends (from send_counts) or receives (from recv_counts).
std::vector<int> chunk_member_rows(const ExchangeLayout& layout, int i, int n, bool recv);
// Canonical rows of chunk i of n on the expert side, in the order they arrive.
std::vector<int> recv_chunk_canonical(const ExchangeLayout& layout, int i, int n);
// Per canonical row: its local expert, and its chunk of n.
std::vector<int> canonical_experts(const ExchangeLayout& layout);
std::vector<int> canonical_chunks(const ExchangeLayout& layout, int n);
// Rows `index` of int rows of `width` values each.
std::vector<int> gather_ints(const std::vector<int>& v, int width, const std::vector<int>& index);

}  // namespace moecomm::nn
