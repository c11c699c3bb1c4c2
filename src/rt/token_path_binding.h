#pragma once
// The MoE token path on the schedule runtime (ModelBinding's layers without NetMoE): each
// layer's rows, chunk by chunk, from the Order through the dispatch A2A (forward: behind the
// sender's row counts for each destination's L experts, L int32, so the experts learn the
// layout with the rows), MoNTA's ESP AllGather and reordering copy, the experts, the ESP
// ReduceScatter / AllReduce, the combine A2A and the TP AllGather back to the I-Order. Which of
// these ops exist, how many chunks and the TP parts come from the schedule (MoeOps). Under
// MoNTA's drop, TP member u sends part u of each chunk (nn::chunk_layout split in tp parts).
// Adapters on the A2As: HybridEP's peers (HybridRemap) and bf16 rows (bf16_wire.h).
#include <array>
#include <cstdint>
#include <vector>

#include "core/rank_groups.h"
#include "nn/exchange_chunks.h"
#include "nn/moe_transformer.h"
#include "rt/hybrid_remap.h"
#include "rt/moe_path_binding.h"

namespace moecomm::rt {

// How this rank's token path meets the schedule's collectives.
struct TokenPathWiring {
  MoeLayerOps ops;            // per layer and phase, from the schedule
  int parts = 1, part = 0;    // TP members that split each chunk (MoNTA's drop), this rank's
  core::RankGroup a2a_group;  // the EP-wide A2A's members (world ranks); empty: none
  HybridRemap remap;          // HybridEP: exchange ranks -> the A2A's members
  std::vector<int> order;     // HybridEP: position -> EP member that owns its experts
  // Per direction, whether the token A2As carry their rows as bf16: [0] the dispatch A2As
  // (toward the experts), [1] the combine A2As (back), as the strategy's a2a_dtype has them.
  std::array<bool, 2> bf16_rows = {false, false};
  int world = 1;  // the schedule's world size
  // a2a=dedup: the token A2As move rows with their tokens (rt/dedup_a2a.h) and the combine
  // weights are applied at the experts (nn::MoeLayer::forward_end_at_experts); plain EP only.
  bool dedup = false;
};

class TokenPathBinding final : public MoePathBinding {
 public:
  TokenPathBinding(nn::MoeTransformer& model, TokenPathWiring wiring);

  void add_kernels(std::map<sched::OpRole, Kernel>& kernels) override;
  bool has_buffer(sched::OpRole role) const override;
  OpBuffer* buffer(sched::OpRole role, int layer, int phase, int chunk) override;
  void after(sched::OpRole role, int layer, int phase, int chunk) override;
  void start_step(const std::vector<int>& targets, int seq_len) override;
  void forward_done(int layer) override;
  void backward_begin(int layer) override { pack(layer, 1); }
  const std::vector<int64_t>& meta_bytes() const override { return header_bytes_; }

  // Since construction: the rows this rank's forward dispatches sent to each EP member (before
  // MoNTA's drop), and how many dispatches (layers x runs) they add up.
  const std::vector<int64_t>& dispatch_rows() const { return dispatch_rows_; }
  int64_t dispatches() const { return dispatches_; }

 private:
  // One chunk of one MoE layer in one phase, from the sender's rows back to them.
  struct Chunk {
    OpBuffer dispatch, gather;            // the A2A (forward: with headers), the ESP AllGather-v
    std::vector<nn::Tensor> parts;        // per TP part, the rows received, source-major
    nn::Tensor expert_in;                 // local-expert-major in the chunk's layout
    OpBuffer reduce, combine, tp_gather;  // ESP ReduceScatter-v / AllReduce, A2A, TP AllGather-v
    std::vector<nn::Tensor> back;         // per TP part, the combined rows, in its send layout
    bool placed = false;
    // a2a=dedup, the experts' side: each received row's token (source-major, as received)
    // and, local-expert-major, its combine weight (forward) or that weight's gradient
    // (backward), [rows, 1].
    std::vector<int32_t> keys;
    nn::Tensor weight, grad_weight;
    std::vector<float> token_sums;  // the combine's, [tokens, cols]
    std::vector<DedupSent> sent;    // the chunk's A2As': rows and metadata per member
  };
  struct MoeState {
    MoeOps ops;
    bool has_layout = false;
    nn::Tensor send;      // forward: the Order's rows; backward: I-Order's gradient
    nn::Tensor combined;  // what came back, in the send layout
    std::vector<Chunk> chunk;
    // a2a=dedup: the tokens the combine returns, and (backward) each sent row's weight gradient;
    // forward, the experts' side: every dispatched row's weight and unweighted output, in the
    // full dispatched layout, for the backward's chunks (any degree) to read.
    int64_t tokens = 0;
    std::vector<float> grad_row_weight;
    nn::Tensor weight, output;
  };
  MoeState& state(int layer, int phase) { return moe_.at(size_t(layer))[size_t(phase)]; }
  nn::MoeLayer& moe(int layer) { return *layers_.at(size_t(layer)); }
  // Chunk i of n of `layout` and its TP part u (of parts_).
  nn::ExchangeLayout part_layout(const nn::ExchangeLayout& layout, int i, int n, int u) const;

  void gate(const sched::Label& label);
  void expert(const sched::Label& label);
  void pack(int layer, int phase);
  void on_dispatched(int layer, int phase, int chunk);
  void learn_layout(int layer, int phase, const std::vector<int>& recv);
  void on_gathered(int layer, int phase, int chunk);
  void place(int layer, int phase, int chunk);  // parts -> expert_in (MoNTA's copy)
  void expert_output(int layer, int phase, int chunk, const nn::Tensor& rows);
  void on_reduced(int layer, int phase, int chunk);
  void on_combined(int layer, int phase, int chunk);
  void on_tp_gathered(int layer, int phase, int chunk);
  void assemble(int layer, int phase, int chunk);  // back -> combined (MoNTA's copy)
  void count_dispatch(const std::vector<int>& send_counts);
  // a2a=dedup's halves of pack, after, place and expert_output.
  void pack_keyed(int layer, int phase, int chunk, const nn::ExchangeLayout& layout,
                  const std::vector<std::vector<int32_t>>& headers);
  void on_keyed_dispatch(int layer, int phase, int chunk);
  void weigh_at_experts(int layer, int phase, int chunk);
  void combine_keyed(int layer, int phase, int chunk, const nn::Tensor& rows);
  void on_keyed_combine(int layer, int phase, int chunk);
  void count_meta(int layer);
  nn::Tensor summed_tokens(MoeState& st);
  size_t block_header(int layer, int phase);  // bytes ahead of each block of a token A2A
  OpBuffer* to_wire(OpBuffer* buf, size_t header, bool bf16) const;
  void from_wire(OpBuffer& buf, size_t header, bool bf16) const;

  nn::MoeTransformer& model_;
  std::vector<nn::MoeLayer*> layers_;
  int64_t cols_;  // hidden: floats per token row
  int parts_, part_;
  core::RankGroup a2a_group_;
  HybridRemap remap_;
  std::vector<int> order_;
  std::array<bool, 2> bf16_rows_;
  int world_;
  bool dedup_;
  std::vector<std::array<MoeState, 2>> moe_;
  std::vector<int64_t> header_bytes_;
  std::vector<int64_t> dispatch_rows_;
  int64_t dispatches_ = 0;
};

}  // namespace moecomm::rt
