#pragma once
// Row permutations between the A2A-v receive layout and the experts' layout (for
// TokenExchange implementations; see token_exchange.h):
//   source-major:        blocks [src][l], block (src, l) has recv_counts[src * L + l] rows
//   local-expert-major:  blocks [l][src], the same blocks, rows within a block in order.
#include "nn/token_exchange.h"

namespace moecomm::nn {

Tensor source_to_expert_major(const Tensor& rows, const ExchangeLayout& layout);
Tensor expert_to_source_major(const Tensor& rows, const ExchangeLayout& layout);

}  // namespace moecomm::nn
