#pragma once
// TokenExchange::pipeline for the MPI exchanges (FSMoE Fig. 3d, Lina's A2A/FFN micro-ops):
// chunk i's experts run on the calling thread while one communication thread runs the next
// chunk's dispatch and the previous chunk's combine, in the order
//   D_0, D_1, C_0, D_2, C_1, ..., D_{n-1}, C_{n-2}, C_{n-1}
// (every chunk's exchange in turn on the communicators, so no two threads share one). The
// chunks are exchange_chunks.h's, so the result is exactly combine(experts(dispatch(send))).
#include <functional>

#include "nn/token_exchange.h"
#include "rt/tp_streams.h"

namespace moecomm::rt {

// A dispatch or combine of one chunk (in its chunk layout) on the communication thread.
using ChunkExchange = std::function<nn::Tensor(
    const nn::Tensor& rows, const nn::ExchangeLayout& chunk_layout, const StreamContext& ctx)>;

// `threads` false runs everything on the calling thread, chunk after chunk.
nn::Tensor pipeline_chunks(const nn::Tensor& send, const nn::ExchangeLayout& layout, int chunks,
                           const nn::TokenExchange::ChunkExperts& experts,
                           const ChunkExchange& dispatch, const ChunkExchange& combine,
                           const StreamContext& outer, bool threads = true);

}  // namespace moecomm::rt
