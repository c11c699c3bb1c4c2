#pragma once
// nn::TokenExchange under tensor parallelism (Megatron-Core folding, DESIGN.md): TP size t =
// ESP size, TP/ESP groups are t consecutive world ranks, the EP group is the ranks with this
// rank's TP index. The members of a TP group hold identical tokens; the experts are
// ESP-sharded, so each ESP member's expert outputs are partial sums over the ESP group.
//
//   kReplicate (DeepSpeed's baseline): dispatch = A2A over EP of every row; combine =
//     AllReduce over ESP of the partial outputs, then the A2A back.
//   kDropAllGather (MoNTA O1 Fig. 5, DeepSpeed-TED): TP member u keeps part u of every
//     expert block (exchange_chunks.h split, n = t), so the A2A over EP carries 1/t of the
//     rows; an AllGather-v over ESP restores the full dispatched buffer. Combine:
//     ReduceScatter-v over ESP (member u gets the summed part u of every block), the A2A back,
//     AllGather-v over the TP group to the full send layout on every TP member.
//   chunks N > 1 (MoNTA O2, Fig. 7): the parts split into N chunks; the A2As run on one
//     thread (EP communicator) and the ESP collectives on another (ESP communicator), so
//     chunk i's AllGather overlaps chunk i+1's A2A; each chunk's reordering copy follows its
//     AllGather on that thread (Algorithm 1) or, with copy_pipelining (O3, Fig. 9), runs on a
//     third thread beside the next AllGather (Algorithm 2). Replicate mode chunks the same
//     way (AllReduce on the ESP thread).
//
// Results equal MpiTokenExchange over the EP communicator: dispatch exactly (rows are only
// copied); combine up to the order of the ESP sums. Chunking never changes a result: the
// pieces of a block cover it and every row is summed over the same members (bit-identical
// for t <= 2; for t > 2 MPI may add t partials in a size-dependent order).
// exchange_counts also checks that the TP members' counts agree (a clear error otherwise).
#include "nn/token_exchange.h"
#include "rt/comm.h"
#include "rt/link_bytes.h"
#include "rt/mpi_token_exchange.h"
#include "rt/tp_streams.h"
#include "rt/wait.h"
#include "sched/op.h"
#include "sched/strategy.h"

namespace moecomm::rt {

struct TpExchangeOptions {
  sched::TpDispatch dispatch = sched::TpDispatch::kDropAllGather;
  sched::Algorithm algorithm = sched::Algorithm::kFlat;  // the EP A2A: flat, 1DH or 2DH
  int chunks = 1;                // MoNTA O2's N; 1 = O1 (at most sched::kMaxChunks)
  bool copy_pipelining = false;  // MoNTA O3
};

class TpTokenExchange final : public nn::TokenExchange {
 public:
  // `ep` and `esp` are this rank's EP and ESP (= TP) communicators; call.ranks_per_node sets
  // the link levels, call.bytes is replaced by this exchange's own counter. Throws
  // moecomm::Error when the groups are not the Megatron-Core folding or an option is bad.
  TpTokenExchange(const Comm& ep, const Comm& esp, CallOptions call,
                  TpExchangeOptions options = {});

  int ranks() const override { return ep_.size(); }
  int rank() const override { return ep_.rank(); }
  int tp_size() const { return esp_.size(); }
  int tp_rank() const { return esp_.rank(); }
  const TpExchangeOptions& options() const { return options_; }

  nn::ExchangeLayout exchange_counts(const std::vector<int>& send_counts) override;
  nn::Tensor dispatch(const nn::Tensor& send, const nn::ExchangeLayout& layout) override;
  nn::Tensor combine(const nn::Tensor& expert_rows, const nn::ExchangeLayout& layout) override;
  // FSMoE Fig. 3d: per chunk A2A -> ESP AllGather -> experts -> ESP ReduceScatter -> A2A ->
  // TP AllGather; the communication (one thread) overlaps the experts (the calling thread).
  // Each pipeline chunk's exchange is unchunked (N applies to dispatch and combine). The
  // experts must not use this exchange's communicators (they run beside its thread).
  nn::Tensor pipeline(const nn::Tensor& send, const nn::ExchangeLayout& layout, int chunks,
                      const ChunkExperts& experts) override;

  // Bytes this rank sent over every collective (A2A, AllGather, ReduceScatter, AllReduce).
  const LinkBytes& bytes() const { return bytes_; }
  void reset_bytes() { bytes_ = {}; }

 private:
  bool drop() const { return options_.dispatch == sched::TpDispatch::kDropAllGather; }
  CallOptions call(const char* name, int chunk, int chunks, const StreamContext& ctx) const;
  StreamOrder order(const std::vector<int>& stream_of, int chunks) const;
  nn::Tensor dispatch_in(const nn::Tensor& send, const nn::ExchangeLayout& layout, int chunks,
                         const StreamContext& ctx);
  nn::Tensor combine_in(const nn::Tensor& expert_rows, const nn::ExchangeLayout& layout, int chunks,
                        const StreamContext& ctx);
  void check_tp_counts(const nn::ExchangeLayout& layout);

  const Comm& ep_;
  const Comm& esp_;
  CallOptions call_;
  TpExchangeOptions options_;
  MpiTokenExchange counts_;  // the counts' A2A over EP
  LinkBytes bytes_;
};

}  // namespace moecomm::rt
