#include "rt/tp_chunk_pipeline.h"

#include <string>

#include "core/error.h"
#include "nn/exchange_chunks.h"
#include "sched/strategy.h"

namespace moecomm::rt {
namespace {

enum Stage { kDispatch, kExperts, kCombine };

// Stream 0 (the caller): the experts in chunk order. Stream 1: D_0, then D_{i+1}, C_i.
StreamOrder overlapped_order(int chunks) {
  StreamOrder order(2);
  order[1].push_back({kDispatch, 0});
  for (int i = 0; i < chunks; ++i) {
    order[0].push_back({kExperts, i});
    if (i + 1 < chunks) order[1].push_back({kDispatch, i + 1});
    order[1].push_back({kCombine, i});
  }
  return order;
}

}  // namespace

nn::Tensor pipeline_chunks(const nn::Tensor& send, const nn::ExchangeLayout& layout, int chunks,
                           const nn::TokenExchange::ChunkExperts& experts,
                           const ChunkExchange& dispatch, const ChunkExchange& combine,
                           const StreamContext& outer, bool threads) {
  if (chunks < 1 || chunks > sched::kMaxChunks)
    throw Error("pipeline", "chunks must be in [1, " + std::to_string(sched::kMaxChunks) +
                                "], got " + std::to_string(chunks));
  if (send.rows() != layout.send_rows()) throw Error("pipeline", "rows differ from counts");
  std::vector<nn::ExchangeLayout> chunk(static_cast<size_t>(chunks));
  for (int i = 0; i < chunks; ++i)
    chunk[static_cast<size_t>(i)] = nn::chunk_layout(layout, i, chunks);
  std::vector<nn::Tensor> rows(static_cast<size_t>(chunks));  // dispatched, then expert outputs
  nn::Tensor combined(send.shape());
  const std::vector<StageFn> stages = {
      [&](int i, const StreamContext& ctx) {
        const auto k = static_cast<size_t>(i);
        rows[k] = dispatch(nn::take_send_chunk(send, layout, i, chunks), chunk[k], ctx);
      },
      [&](int i, const StreamContext&) {
        const auto k = static_cast<size_t>(i);
        rows[k] = experts(i, chunk[k], rows[k]);
      },
      [&](int i, const StreamContext& ctx) {
        const auto k = static_cast<size_t>(i);
        nn::put_send_chunk(combined, combine(rows[k], chunk[k], ctx), layout, i, chunks);
        rows[k] = {};
      }};
  const bool overlap = threads && chunks > 1;
  run_streams(stages, overlap ? overlapped_order(chunks) : chunk_major_order(3, chunks), outer);
  return combined;
}

}  // namespace moecomm::rt
