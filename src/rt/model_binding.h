#pragma once
// Binds a MoeTransformer to the training-step schedule that sched::build_training_step emits
// for it (DESIGN.md "One schedule, three executors"), so that rt::Executor runs the step op by
// op, as Megatron-Core runs its EP-overlap schedule plan: compute and copy ops find their
// kernels in a registry keyed by the op's role (sched::OpRole), collectives their buffers by its
// (role, layer, phase, chunk). No knob has code here: how many chunks, which A2A algorithm,
// whether TP members drop and gather (MoNTA O1) or replicate, whether the experts wait for
// every chunk, which partitions, on which stream and in which order all come from the ops the
// schedule has.
//
// Kernels (compute and copy ops):
//   attn   forward: the embedding (block 0) or the previous MoE layer's I-Order and residual;
//          then this rank's attention heads. backward: the heads' backward.
//   gate   forward: LN2, Gate and Order, packed into the dispatch chunks. backward: Order's
//          and Gate's backward from the combined chunks, then LN2's (the MoE path's).
//   moe.expert  the chunk's experts (label chunk -1 with several chunks: every chunk's rows
//          at once, MoNTA's experts that wait for the whole dispatch).
//   moe.dispatch.esp_allgather.copy, moe.combine.tp_allgather.copy  MoNTA's reordering
//          copies (Fig. 8): a gathered chunk into the experts' layout, a combined chunk into
//          the send layout (without these ops the consumer reorders; token_path_binding.h).
//   head   forward: the last MoE layer's I-Order, final norm, LM head and loss. backward: the
//          head's, then the last MoE layer's I-Order backward, packed.
// Collectives and what runs right after each on its stream (its epilogue):
//   attn.tp.allreduce  the heads' outputs (forward: x += them) or input gradients
//          (backward: LN1's backward, then the previous MoE layer's I-Order backward, packed).
//   moe.dispatch.a2a, moe.dispatch.esp_allgather, moe.combine.esp_reducescatter /
//          esp_allreduce, moe.combine.a2a, moe.combine.tp_allgather  a chunk's rows. Under
//          MoNTA's drop, TP member u sends part u of each chunk (nn::chunk_layout split in tp
//          parts; token_path_binding.h, or netmoe_binding.h under placement=netmoe).
//   grad.dense.allreduce, grad.expert.allreduce  a partition of a block's gradients
//          (grad_binding.h).
//   moe.hybrid.expert_allgather, moe.hybrid.grad_reducescatter, moe.hybrid.shared_allreduce
//          HybridEP's experts (HybridBinding's codec): encoded when the AllGather starts and
//          decoded into the copies after it; the copies' gradients home; the shared expert
//          (expert_transfer_binding.h).
// Under HybridEP the MoE layers exchange tokens with the members at their offset of every
// domain (Algorithm 1), which sit at other positions of the schedule's EP-wide A2A: blocks are
// moved between the layers' order and the A2A's (hybrid_remap.h).
// A forward dispatch chunk carries, ahead of each destination's rows, the sender's full row
// counts for that destination's L experts (L int32), so the experts learn the layout with the
// rows; every other transfer's counts follow from that layout.
#include <array>
#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "nn/moe_transformer.h"
#include "rt/executor.h"
#include "rt/expert_transfer_binding.h"
#include "rt/grad_binding.h"
#include "rt/hybrid_codec.h"
#include "rt/moe_path_binding.h"
#include "rt/netmoe_binding.h"
#include "rt/token_path_binding.h"
#include "sched/schedule.h"

namespace moecomm::rt {

// HybridEP (expert_transfer=hybrid): how the EP group splits into domains (the member order
// of sched::hybrid_member_order, empty: the identity; domains of `domain` positions) and the
// codec that moves this rank's experts (nullptr without expert transfer).
struct HybridBinding {
  std::vector<int> order;
  int domain = 1;
  HybridCodec* codec = nullptr;
};

// The pipeline stage this rank runs: its model chunks' global blocks [first, end), in order
// (one chunk per virtual stage; empty: the whole model). The embedding runs at block 0 and the
// LM head where the schedule puts it; a chunk that starts elsewhere starts from the received
// residual stream, and its backward ends by sending its gradient. The schedule's Label.layer is
// layer_offset short of the global block (0: it is global).
struct StageBinding {
  std::vector<std::pair<int, int>> chunks = {};
  int layer_offset = 0;
};

struct BindingOptions {
  HybridBinding hybrid = {};
  int ranks_per_node = 1;  // NetMoE's placement places samples on nodes and their devices
  StageBinding stage = {};
  // The ops of this rank the binding runs: those of micro-batch `micro_batch` (-1: those tied
  // to none), and with step_ops also those tied to none (the gradient sync).
  int micro_batch = -1;
  bool step_ops = true;
  // The micro-batches' models whose gradients the gradient sync sums into `model` (the others
  // than model itself; empty: model alone).
  std::vector<nn::MoeTransformer*> grad_sources = {};
  // The kernel of the schedule's optimizer op, when it has one (the caller's Adam step).
  std::function<void()> optimizer = {};
};

// The registry: the dense kernels (attention, head) and the attention's TP AllReduce here; the
// MoE layers' kernels and collectives in their path (TokenPathBinding, or NetMoeBinding under
// placement=netmoe); the gradient partitions in GradBinding; HybridEP's expert transfers in
// ExpertTransferBinding.
class ModelBinding {
 public:
  // The token A2As carry their rows as their codec's dtype (sched::WireCodec, the strategy's
  // a2a_dtype per direction): fp32, or bf16 (nn/bf16.h: rounded to nearest even; the layout
  // counts stay int32, compute fp32), which runs on the plain EP A2A only. Throws
  // moecomm::Error naming the op when this rank's part of the schedule has an op that no kernel
  // or buffer is registered for, or a layer the model does not have, or bf16 rows beside
  // collectives that sum or move other data, or token A2As of another dtype, or A2As of one
  // direction in different dtypes.
  ModelBinding(const sched::Schedule& schedule, int rank, nn::MoeTransformer& model,
               BindingOptions options = {});
  ModelBinding(const ModelBinding&) = delete;
  ModelBinding& operator=(const ModelBinding&) = delete;

  // Registers the kernels, buffers and epilogues with the executor, which must run `schedule`.
  void bind(Executor& executor);
  // For a runtime that holds several bindings (one per micro-batch in flight): whether this
  // binding runs op `id`; its kernels only; the buffer and epilogue of one of its ops.
  bool owns(sched::OpId id) const { return labels_.count(id) > 0; }
  bool owns_any() const { return !ops_.empty(); }
  void bind_kernels(Executor& executor);
  OpBuffer* buffer(sched::OpId op);
  void after(sched::OpId op);
  // After the run: the gradients no gradient-sync op of this binding summed (groups of one)
  // summed from grad_sources into the model.
  void finish_step() { grads_.finish_step(); }
  // Before each run: the batch the forward reads.
  void start_step(const std::vector<int>& tokens, const std::vector<int>& targets, int seq_len);
  float loss() const { return loss_; }  // the last run's loss, as forward() returns it
  int64_t grad_bytes() const { return grads_.bytes(); }  // AllReduced by the last run, this rank
  // Since construction: the rows this rank's forward dispatches sent to each EP member (before
  // MoNTA's drop), and how many dispatches (layers x runs) they add up; none under NetMoE
  // (its scatter_rows()).
  const std::vector<int64_t>& dispatch_rows() const;
  int64_t dispatches() const { return token_path_ ? token_path_->dispatches() : 0; }
  // The last run's metadata riding with the token rows (the layout's counts ahead of them,
  // NetMoE's metadata columns), in bytes per destination world rank, counted apart from them.
  std::vector<int64_t> meta_bytes() const { return moe_->meta_bytes(); }
  // placement=netmoe: its part of the binding (nullptr without it).
  const NetMoeBinding* netmoe() const { return netmoe_.get(); }

 private:
  struct Slot {
    sched::OpRole role;
    int layer, phase, chunk, parts;  // phase: 0 forward, 1 backward; parts: AllReduce pieces
  };
  using Kernel = MoePathBinding::Kernel;

  TokenPathWiring scan_ops(const HybridBinding& hybrid, bool& has_netmoe, int& a2a_member);
  void wire_rows(sched::OpId id, sched::OpId& first, bool& bf16) const;  // one direction's
  void bind_path(TokenPathWiring wiring, bool has_netmoe, int a2a_member,
                 const BindingOptions& options);
  void register_kernels(const std::function<void()>& optimizer);
  void check_ops() const;

  void attn(const sched::Label& label);
  void head(const sched::Label& label);
  void attn_done(int layer, int phase, const nn::Tensor& summed);
  OpBuffer* stage_buffer(sched::OpRole role, OpBuffer& buf);
  void stage_after(sched::OpRole role, const OpBuffer& buf);
  bool chunk_starts(int block) const;  // the first block of one of the stage's chunks
  const sched::Label& label(sched::OpId id) const { return labels_.at(id); }

  const sched::Schedule& s_;
  int rank_;
  nn::MoeTransformer& model_;
  StageBinding stage_;
  // This binding's ops and their labels, Label.layer made the global block.
  std::unordered_map<sched::OpId, sched::Label> labels_;
  std::vector<sched::OpId> ops_;  // in the schedule's order
  int layers_;                    // MoE layers
  int64_t cols_;                  // hidden: floats per token row
  GradBinding grads_;
  std::optional<ExpertTransferBinding> transfer_;  // HybridEP with expert transfer
  std::unique_ptr<TokenPathBinding> token_path_;   // or
  std::unique_ptr<NetMoeBinding> netmoe_;
  MoePathBinding* moe_ = nullptr;                          // the one of them
  std::map<sched::OpRole, Kernel> kernels_;                // compute and copy ops, by role
  std::unordered_map<sched::OpId, Slot> slots_;            // this rank's collectives
  std::unordered_map<sched::OpId, OpBuffer> own_buffers_;  // gradients, attention sums, experts
  // Per layer and phase: the TP AllReduce of the attention's output (kNone: none).
  std::vector<std::array<sched::OpId, 2>> attn_tp_;
  std::vector<int> tokens_, targets_;
  int seq_len_ = 0;
  // This run's pipeline progress: the last block whose forward started, and the chunk whose
  // backward starts next (chunks run forward in order and backward in reverse).
  int forward_block_ = -1, backward_chunk_ = 0;
  float loss_ = 0;
};

}  // namespace moecomm::rt
