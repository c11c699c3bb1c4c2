#pragma once
// The Dispatch and Combine modules (FSMoE Sec. 3.1) as an interface, so that the MoE layer's
// math does not depend on where experts live. LocalExchange (one process, all experts) is the
// identity; the runtime (src/rt) implements it with MPI A2A-v over the EP group.
//
// Contract (every rank of the EP group makes the same calls in the same order):
//   * EP = ranks(); E experts, L = E / EP local experts; rank p holds global experts
//     [p L, (p + 1) L): global expert e = dst * L + l lives on rank dst as local expert l.
//   * Send buffer (the Order module's output): [sum(send_counts), M], expert-major over the
//     E global experts: the rows for global expert e are contiguous, in order e = 0..E-1.
//     Since e = dst * L + l, this is also destination-major, so the rows for rank dst are
//     the contiguous block of experts [dst L, (dst + 1) L), ready for A2A-v.
//   * exchange_counts(send_counts [E]) -> ExchangeLayout: an all-to-all of the counts.
//     recv_counts[src * L + l] = rows rank src sends to this rank's local expert l
//     (= src's send_counts[rank() * L + l]).
//   * dispatch(send, layout) -> [sum(recv_counts), M] in LOCAL-EXPERT-MAJOR order: local
//     expert l's rows are contiguous (so an expert runs one GEMM on them), and within l the
//     rows come from src = 0..EP-1, each src's rows in the order src sent them. A2A-v
//     delivers source-major ([src][l]); source_to_expert_major() (exchange_permute.h) makes
//     it local-expert-major.
//   * combine(expert_rows, layout) is the exact inverse: expert_rows has dispatch's output
//     layout ([l][src]); the result has the send buffer's layout ([e]) on the sending rank:
//     expert_to_source_major(), then A2A-v back with the counts swapped.
//   * Backward uses the same two calls with the same layout: the layer dispatches the
//     gradient of the combined rows (the send layout) to the experts, and combines the
//     gradient of the expert inputs back. Rows are opaque fp32 vectors of M = cols() values;
//     an implementation may carry them as bf16 (nn/bf16.h), which rounds them.
//   * With the capacity layout, send_counts[e] = C for every e (padding rows are sent too,
//     as GShard does); with the dropless layout they vary.
#include <functional>
#include <vector>

#include "nn/tensor.h"

namespace moecomm::nn {

struct ExchangeLayout {
  int ranks = 1;                 // EP
  int local_experts = 0;         // L
  std::vector<int> send_counts;  // [EP * L], index dst * L + l (= global expert)
  std::vector<int> recv_counts;  // [EP * L], index src * L + l

  int experts() const { return ranks * local_experts; }
  int send_rows() const;
  int recv_rows() const;
  // Rows this rank's local expert l receives (sum over sources), and its first row in the
  // dispatched (local-expert-major) buffer.
  int local_rows(int l) const;
  int local_offset(int l) const;
};

class TokenExchange {
 public:
  virtual ~TokenExchange() = default;
  virtual int ranks() const = 0;  // EP
  virtual int rank() const = 0;   // this rank's index in the EP group
  virtual ExchangeLayout exchange_counts(const std::vector<int>& send_counts) = 0;
  virtual Tensor dispatch(const Tensor& send, const ExchangeLayout& layout) = 0;
  virtual Tensor combine(const Tensor& expert_rows, const ExchangeLayout& layout) = 0;

  // Dispatch -> experts -> combine of `send` in `chunks` pieces (exchange_chunks.h: FSMoE's
  // pipeline degree r, Lina's A2A/FFN micro-ops). `experts(i, chunk_layout, rows)` gets
  // chunk i's dispatched rows (local-expert-major in chunk i's layout) and returns their
  // outputs in the same layout. Returns exactly what combine(experts(all rows)) returns.
  // The default runs the chunks one after another; implementations overlap chunk i's
  // experts with the other chunks' communication. Chunks are called in order 0..n-1.
  using ChunkExperts =
      std::function<Tensor(int chunk, const ExchangeLayout& chunk_layout, const Tensor& rows)>;
  virtual Tensor pipeline(const Tensor& send, const ExchangeLayout& layout, int chunks,
                          const ChunkExperts& experts);
};

}  // namespace moecomm::nn
