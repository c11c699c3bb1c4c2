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
//          and Gate's backward from the combined chunks, then LN2's.
//   moe.expert  the chunk's experts (label chunk -1 with several chunks: every chunk's rows
//          at once, MoNTA's experts that wait for the whole dispatch).
//   moe.dispatch.esp_allgather.copy, moe.combine.tp_allgather.copy  MoNTA's reordering
//          copies (Fig. 8): a gathered chunk into the experts' layout, a combined chunk into
//          the send layout (without these ops the consumer reorders).
//   head   forward: the last MoE layer's I-Order, final norm, LM head and loss. backward: the
//          head's, then the last MoE layer's I-Order backward, packed.
// Collectives and what runs right after each on its stream (its epilogue):
//   attn.tp.allreduce  the heads' outputs (forward: x += them) or input gradients
//          (backward: LN1's backward, then the previous MoE layer's I-Order backward, packed).
//   moe.dispatch.a2a, moe.dispatch.esp_allgather, moe.combine.esp_reducescatter /
//          esp_allreduce, moe.combine.a2a, moe.combine.tp_allgather  a chunk's rows. Under
//          MoNTA's drop, TP member u sends part u of each chunk (nn::chunk_layout split in tp
//          parts).
//   grad.dense.allreduce, grad.expert.allreduce  a partition of a block's gradients.
//   moe.hybrid.expert_allgather, moe.hybrid.grad_reducescatter, moe.hybrid.shared_allreduce
//          HybridEP's experts (HybridBinding's codec): encoded when the AllGather starts and
//          decoded into the copies after it; the copies' gradients home; the shared expert.
// Under HybridEP the MoE layers exchange tokens with the members at their offset of every
// domain (Algorithm 1), which sit at other positions of the schedule's EP-wide A2A: blocks are
// moved between the layers' order and the A2A's.
// A forward dispatch chunk carries, ahead of each destination's rows, the sender's full row
// counts for that destination's L experts (L int32), so the experts learn the layout with the
// rows; every other transfer's counts follow from that layout.
#include <array>
#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "nn/moe_transformer.h"
#include "rt/executor.h"
#include "rt/hybrid_codec.h"
#include "rt/netmoe_binding.h"
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

struct BindingOptions {
  HybridBinding hybrid = {};
  int ranks_per_node = 1;  // NetMoE's placement places samples on nodes and their devices
  // The MoE A2As carry their token rows as bfloat16 (nn/bf16.h: rounded to nearest even),
  // the layout counts as int32; compute stays fp32. Plain EP only (no ESP/TP collectives,
  // HybridEP or NetMoE).
  bool bf16_rows = false;
};

class ModelBinding {
 public:
  // Throws moecomm::Error naming the op when this rank's part of the schedule has an op that no
  // kernel or buffer is registered for, or a layer the model does not have, or bf16 rows
  // beside collectives that sum or move other data.
  ModelBinding(const sched::Schedule& schedule, int rank, nn::MoeTransformer& model,
               BindingOptions options = {});
  ModelBinding(const ModelBinding&) = delete;
  ModelBinding& operator=(const ModelBinding&) = delete;

  // Registers the kernels, buffers and epilogues with the executor, which must run `schedule`.
  void bind(Executor& executor);
  // Before each run: the batch the forward reads.
  void start_step(const std::vector<int>& tokens, const std::vector<int>& targets, int seq_len);
  float loss() const { return loss_; }  // the last run's loss, as forward() returns it
  int64_t grad_bytes() const { return grad_bytes_; }  // AllReduced by the last run, this rank
  // Since construction: the rows this rank's forward dispatches sent to each EP member (before
  // MoNTA's drop), and how many dispatches (layers x runs) they add up.
  const std::vector<int64_t>& dispatch_rows() const { return dispatch_rows_; }
  // The last run's metadata riding with the token rows (the layout's counts ahead of them,
  // NetMoE's metadata columns), in bytes per destination world rank, counted apart from them.
  std::vector<int64_t> meta_bytes() const;
  // placement=netmoe: its part of the binding (nullptr without it).
  const NetMoeBinding* netmoe() const { return netmoe_.get(); }
  int64_t dispatches() const { return dispatches_; }

 private:
  static bool hybrid_role(sched::OpRole r) {
    return sched::family(r) == sched::OpFamily::kExpertTransfer;
  }
  struct Slot {
    sched::OpRole role;
    int layer, phase, chunk, parts;  // phase: 0 forward, 1 backward; parts: AllReduce pieces
  };
  // One chunk of one MoE layer in one phase, from the sender's rows back to them.
  struct Chunk {
    OpBuffer dispatch, gather;            // the A2A (forward: with headers), the ESP AllGather-v
    std::vector<nn::Tensor> parts;        // per TP part, the rows received, source-major
    nn::Tensor expert_in;                 // local-expert-major in the chunk's layout
    OpBuffer reduce, combine, tp_gather;  // ESP ReduceScatter-v / AllReduce, A2A, TP AllGather-v
    std::vector<nn::Tensor> back;         // per TP part, the combined rows, in its send layout
    bool placed = false;
  };
  // Which of the token path's ops the schedule has for a layer and phase (per rank).
  struct MoeOps {
    bool dispatch = false, gather = false, gather_copy = false, reduce = false, combine = false,
         tp_gather = false, combine_copy = false;
  };
  struct MoeState {
    int chunks = 1;
    MoeOps ops;
    bool has_layout = false;
    nn::Tensor send;      // forward: the Order's rows; backward: I-Order's gradient
    nn::Tensor combined;  // what came back, in the send layout
    std::vector<Chunk> chunk;
  };
  using Kernel = std::function<void(const sched::Label&)>;

  void register_kernels();
  void scan_ops();
  void bind_netmoe(int ranks_per_node);
  std::optional<NetMoeBinding::Op> netmoe_op(const Slot& slot) const;
  void scan_moe_op(const sched::Label& label);
  MoeState& state(int layer, int phase) { return moe_.at(size_t(layer))[size_t(phase)]; }
  nn::MoeLayer& moe(int layer) { return *layers_.at(size_t(layer)); }
  // Chunk i of n of `layout` and its TP part u (of parts_).
  nn::ExchangeLayout part_layout(const nn::ExchangeLayout& layout, int i, int n, int u) const;

  void attn(const sched::Label& label);
  void gate(const sched::Label& label);
  void expert(const sched::Label& label);
  void head(const sched::Label& label);
  void attn_done(int layer, int phase, const nn::Tensor& summed);

  void pack(int layer, int phase);
  void finish_forward(int layer);
  void on_dispatched(int layer, int phase, int chunk);
  void on_gathered(int layer, int phase, int chunk);
  void place(int layer, int phase, int chunk);  // parts -> expert_in (MoNTA's copy)
  void expert_output(int layer, int phase, int chunk, const nn::Tensor& rows);
  void on_reduced(int layer, int phase, int chunk);
  void on_combined(int layer, int phase, int chunk);
  void on_tp_gathered(int layer, int phase, int chunk);
  void assemble(int layer, int phase, int chunk);  // back -> combined (MoNTA's copy)
  void after(sched::OpId op);
  void map_members(const sched::Collective& a2a, int member);
  OpBuffer* to_members(OpBuffer& buf) const;  // exchange-rank blocks -> the A2A's members
  void from_members(OpBuffer& buf) const;     // and back
  void count_dispatch(const std::vector<int>& send_counts);
  OpBuffer* hybrid_buffer(const Slot& slot, OpBuffer& buf);
  size_t block_header(const Slot& slot);  // bytes ahead of each block of a token A2A
  OpBuffer* to_wire(OpBuffer* buf, size_t header) const;  // bf16_rows: fp32 rows -> bf16
  void from_wire(OpBuffer& buf, size_t header) const;     // and back
  bool moe_ops_beside_a2a() const;
  void hybrid_after(const Slot& slot, const OpBuffer& buf);
  OpBuffer* buffer(sched::OpId op);
  void pack_grads(const Slot& slot, OpBuffer& buf);
  void unpack_grads(const Slot& slot, const OpBuffer& buf);

  const sched::Schedule& s_;
  int rank_;
  nn::MoeTransformer& model_;
  std::vector<nn::MoeLayer*> layers_;
  int64_t cols_;   // hidden: floats per token row
  int parts_ = 1;  // TP members that split each chunk (MoNTA's drop); 1: none
  int part_ = 0;   // this rank's part
  HybridBinding hybrid_;
  bool bf16_rows_ = false;
  // HybridEP: the A2A's member of each exchange rank, and the A2A's size (empty: the same).
  std::vector<int> member_of_;
  int a2a_size_ = 0;
  core::RankGroup a2a_group_;  // the EP-wide A2A's members (world ranks)
  int a2a_member_ = 0;         // this rank's member there
  bool has_netmoe_ = false;    // the schedule has NetMoE's ops
  std::unique_ptr<NetMoeBinding> netmoe_;
  std::vector<int64_t> header_bytes_;
  std::map<sched::OpRole, Kernel> kernels_;                // compute and copy ops, by role
  std::unordered_map<sched::OpId, Slot> slots_;            // this rank's collectives
  std::unordered_map<sched::OpId, OpBuffer> own_buffers_;  // gradients, attention sums
  std::vector<std::array<MoeState, 2>> moe_;
  // Per layer and phase: the TP AllReduce of the attention's output (kNone: none).
  std::vector<std::array<sched::OpId, 2>> attn_tp_;
  std::vector<int> tokens_, targets_;
  int seq_len_ = 0;
  float loss_ = 0;
  std::atomic<int64_t> grad_bytes_ = 0;
  std::vector<int64_t> dispatch_rows_;
  int64_t dispatches_ = 0;
};

}  // namespace moecomm::rt
