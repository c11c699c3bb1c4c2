#pragma once
// The MoE sublayer of one block under NetMoE's dynamic sample placement (Sec. 3, Alg. 1):
//   y = h + sum_k w_k E_k(LN2(h)),   h: the block's residual stream [B * S, M]
// computed so that y lands on the samples' NEW ranks:
//   * the gate runs locally on LN2(h); the per-sample expert counts go to the placement
//     (Alg. 1 line 9), which solves while the scatter and the experts run;
//   * the scatter sends h itself (not LN2(h)) with per-row metadata (expert, global token,
//     weight, first-slot flag); the expert side applies LN2, the expert and the weight, and
//     adds the residual on the token's first slot only (Alg. 1 line 12, Appendix A);
//   * the gather (Alg. 1 lines 13-14) sends each output row straight to the new rank of its
//     sample, which sums the k rows of each token into the new sample slot.
// Samples are whole sequences and carry a global id within the EP group (home rank * B + b).
// On each rank the new samples sit in ascending global id. Backward runs the reverse path:
// dy from the new positions to the experts, dh (residual, LN2 and gate) to the old ones.
//
// Chunks (FSMoE Fig. 3d, Lina's A2A/FFN micro-ops; SampleExchange::chunks): every
// (source, expert) block of the scatter is split into contiguous chunks (exchange_chunks.h);
// chunk i's scatter, experts and gather run as a pipeline (SampleExchange::pipeline), the
// placement is collected before the first gather chunk. The backward splits the same blocks
// by its own degree; the forward gather tags each row with its backward chunk so that the
// new rank knows which dy rows each backward chunk takes. Chunking changes when rows travel,
// never what is computed.
//
// The gate's load-balancing loss stays the baseline's: it is computed per HOME rank (the rank
// whose batch a sample came from) from per-expert sums that every member adds up over the
// tokens it holds, grouped by home, and all-gathers (gate.h AuxStats); member r reports home
// r's aux, and the gate's backward differentiates each token's home aux.
// Requires a token-choice gate and the dropless layout: every slot is kept, so each token's
// residual is added exactly once.
#include <functional>
#include <vector>

#include "nn/expert.h"
#include "nn/layer_norm.h"
#include "nn/moe_layer.h"
#include "nn/order.h"
#include "nn/tensor.h"
#include "nn/token_exchange.h"

namespace moecomm::nn {

// What the sublayer needs from the runtime: A2A-v over the EP group and the placement.
class SampleExchange {
 public:
  virtual ~SampleExchange() = default;
  virtual int ranks() const = 0;
  virtual int rank() const = 0;
  // A2A-v of token rows: send_rows[j] rows to member j, back to back. Returns the received
  // rows source-major; recv_rows[i] of them came from member i. A non-empty recv_rows on entry
  // is what the caller knows it receives (no counts exchange: one latency less); empty, it is
  // filled. The last meta_cols columns are the rows' metadata riding along (counted apart).
  virtual Tensor rows(const Tensor& send, const std::vector<int>& send_rows,
                      std::vector<int>& recv_rows, const char* label, int meta_cols) = 0;
  // A2A-v of metadata (counted apart from the rows): send_counts[j] ints to member j;
  // recv_counts, when not empty, the ints each member sends this one (no counts exchange).
  virtual std::vector<int> ints(const std::vector<int>& send, const std::vector<int>& send_counts,
                                const char* label, const std::vector<int>& recv_counts) = 0;
  // AllGather of equal-size int blocks, member-major.
  virtual std::vector<int> all_gather(const std::vector<int>& mine) = 0;
  // NetMoE Alg. 1 line 9: this rank's samples (global ids) and their expert counts
  // [B * E]; starts solving layer `layer`'s placement of the group's I = P * B samples.
  virtual void submit_placement(int layer, const std::vector<int>& samples,
                                const std::vector<int>& counts) = 0;
  // Alg. 1 line 13: the new member of each global sample [I], the same on every member.
  virtual std::vector<int> collect_placement(int layer) = 0;

  // Pipeline degrees of the forward and the backward (FSMoE's r, Lina); 1: unchunked.
  virtual int chunks(bool backward) const { return backward ? 1 : 1; }
  // Runs, for i = 0..n-1, send(i) -> work(i) -> recv(i): send and recv exchange rows (and
  // may overlap the other chunks' work), work computes. Every member makes the same calls.
  // The default runs them one after another on the calling thread.
  using ChunkStage = std::function<void(int chunk)>;
  virtual void pipeline(int chunks, const ChunkStage& send, const ChunkStage& work,
                        const ChunkStage& recv);
};

class SampleMovingMoe {
 public:
  // moe: the block's layer (gate and local experts are used, its exchange is not); ln2: the
  // block's pre-MoE layer norm. Both must outlive this object. ranks, rank: the EP group's
  // size and this member's place in it. Throws Error unless the layer is dropless
  // (dropless = capacity_factor 0).
  SampleMovingMoe(MoeLayer& moe, LayerNorm& ln2, int layer, bool dropless, int ranks, int rank);

  // The whole sublayer on `exchange` (over the same EP group), from the stages below.
  // h [B * S, M] of the samples `samples` (global ids, updated to the new ones, ascending).
  Tensor forward(const Tensor& h, int seq_len, std::vector<int>& samples, SampleExchange& exchange);
  // dy at the new positions -> dh at the old ones; accumulates gate, LN2 and expert grads.
  Tensor backward(const Tensor& dy, float aux_grad, SampleExchange& exchange);

  // --- the stages forward() and backward() run, for an executor that runs each as a schedule
  // op's kernel or a collective's epilogue (rt/netmoe_binding.h). Forward:
  //   forward_begin; set_aux with the group's aux_sums() all-gathered; set_layout with the
  //   scatter's counts; per chunk i of chunks_fwd: scatter_send(i) -> scatter_received(i) ->
  //   expert_chunk(i) -> gather_send(i) -> gather_received(i), with set_placement before the
  //   first gather_send; forward_end.
  // Backward, per chunk j of chunks_bwd: dy_send(j) -> dy_received(j) -> backward_expert(j) ->
  //   dh_send(j) -> dh_received(j), between backward_begin and backward_end.
  // Different chunks' stages may run on different threads at once (sends and receives on one,
  // the experts on another), as the schedule's streams run them.
  // Metadata columns riding with the rows: the scatter's (global token, first slot, weight
  // bits), the gather's (the row's place at the new rank and backward chunk) and the scatter
  // backward's (the slot's weight gradient).
  static constexpr int kScatterMeta = 3, kGatherMeta = 1, kScatterBackwardMeta = 1;
  struct Rows {
    Tensor rows;            // member blocks back to back, metadata columns last
    std::vector<int> send;  // rows to each member
    std::vector<int> recv;  // rows from each member when known; empty: not known
    int meta_cols = 0;      // trailing columns that are metadata, not the row
  };
  void forward_begin(const Tensor& h, int seq_len, const std::vector<int>& samples, int chunks_fwd,
                     int chunks_bwd);
  // This member's aux-loss sums per home rank, as ints, for the group's AllGather.
  const std::vector<int>& aux_sums() const { return aux_bits_; }
  void set_aux(const std::vector<int>& gathered);  // every member's aux_sums(), member-major
  // NetMoE Eq. 2: per sample held (B, in samples' order), its slots per expert [B * E].
  const std::vector<int>& sample_counts() const { return sample_counts_; }
  const std::vector<int>& samples() const { return samples_; }          // global ids held, as given
  const std::vector<int>& send_counts() const { return plan_.counts; }  // scatter rows [E]
  void set_layout(const std::vector<int>& recv_counts);  // [src * L + l], from the senders
  Rows scatter_send(int chunk) const;                    // Alg. 1 line 10
  void scatter_received(int chunk, const Tensor& rows);
  void expert_chunk(int chunk);  // lines 11-12
  // Line 13: the new member of each of the group's samples [P * B], the same on every member.
  void set_placement(const std::vector<int>& place);
  Rows gather_send(int chunk);  // line 14
  void gather_received(const Tensor& rows, const std::vector<int>& recv);
  Tensor forward_end(std::vector<int>& samples);  // y at the new samples, and their ids
  void backward_begin(const Tensor& dy);
  Rows dy_send(int chunk) const;
  void dy_received(int chunk, const Tensor& rows);
  void backward_expert(int chunk);
  Rows dh_send(int chunk);
  void dh_received(int chunk, const Tensor& rows);
  Tensor backward_end(float aux_grad);

  float aux_loss() const { return routing_.aux_loss; }
  const GateOutput& routing() const { return routing_; }
  int chunks(bool backward) const { return backward ? chunks_bwd_ : chunks_fwd_; }

 private:
  // The expert side, in the canonical order: source-major, local-expert-major within a
  // source (the A2A-v order of the unchunked scatter).
  struct Received {
    Tensor h, out;  // residual rows; expert outputs (unweighted)
    std::vector<int> local_expert, token, first;
    std::vector<float> weight;
  };
  // One gathered row as the new rank saw it (forward chunk-major, source-major within).
  struct Gathered {
    std::vector<int> src, dest, tag;  // expert-side member, row of y, backward chunk
  };
  // The gather's backward of one backward chunk: which rows of dy go to which member, and
  // where the arriving rows sit among the chunk's canonical rows.
  struct DyRoute {
    std::vector<int> rows;           // the chunk's canonical rows (expert side)
    std::vector<int> dy_rows, send;  // token side: rows of dy sent, per member
    std::vector<int> arrival;        // expert side: per arriving row, its index in rows
    std::vector<int> recv;           // expert side: rows arriving per member (known)
  };
  void aux_begin(const std::vector<int>& samples);
  Tensor run_expert_chunk(const std::vector<int>& rows, const Tensor& h,
                          const std::vector<int>& meta);
  Tensor experts_forward(const std::vector<int>& rows, const Tensor& h, bool keep);
  std::vector<DyRoute> dy_routes() const;
  Tensor backward_expert_chunk(const std::vector<int>& rows, const Tensor& dz,
                               std::vector<float>& dw);

  MoeLayer& moe_;
  LayerNorm& ln2_;
  int layer_, ranks_, rank_;
  // Saved by forward.
  GateOutput routing_;
  int seq_len_ = 0, tokens_ = 0, chunks_fwd_ = 1, chunks_bwd_ = 1;
  std::vector<int> aux_home_;        // home rank of each token held
  std::vector<int> aux_bits_;        // this member's sums per home rank
  std::vector<AuxStats> aux_stats_;  // per home rank, over the whole EP group
  OrderPlan plan_;
  std::vector<int> samples_;        // forward_begin's
  std::vector<int> sample_counts_;  // [B * E]
  std::vector<int> meta_;           // per send row: global token, first slot, weight bits
  Tensor send_;                     // the Order's rows (h, expert-major)
  ExchangeLayout layout_;           // the scatter's: send [E], recv [src * L + l]
  Received in_;
  std::vector<Tensor> got_rows_, z_;               // per forward chunk
  std::vector<std::vector<int>> got_meta_, rows_;  // per forward chunk
  std::vector<std::vector<int>> expert_rows_;      // per local expert: its rows of in_
  std::vector<int> expert_pos_;                    // per row of in_: its row in expert_rows_
  std::vector<ExpertCache> caches_;        // per local expert, row-aligned with expert_rows_
  bool recomputed_ = false;                // recompute_experts: caches_ rebuilt this backward
  std::vector<int> place_, slot_, moved_;  // per global sample: new member, slot there
  std::vector<int> sent_row_, sent_dest_;  // gather rows sent: row of in_, new member
  Gathered got_;
  Tensor y_;
  std::vector<int> bwd_chunk_;  // per row of in_: its backward chunk
  bool has_forward_ = false;
  // Saved by backward.
  Tensor dy_, dsend_;
  std::vector<float> dw_send_;
  std::vector<DyRoute> routes_;
  std::vector<Tensor> dz_, dh_;
  std::vector<std::vector<float>> dw_;
};

}  // namespace moecomm::nn
