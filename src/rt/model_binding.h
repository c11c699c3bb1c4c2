#pragma once
// Binds a MoeTransformer to the training-step schedule that sched::build_training_step emits
// for it (DESIGN.md "One schedule, three executors"), so that rt::Executor runs the step op by
// op, as Megatron-Core runs its EP-overlap schedule plan: compute ops find their kernels in a
// registry keyed by the op's label name (attn, gate, moe.expert, head), collectives their
// buffers by the label's (name, layer, phase, chunk): the MoE A2As' chunks and the gradient
// AllReduces' partitions. No knob has code here: how many chunks, which A2A algorithm, which
// partitions, on which stream and in which order all come from the schedule.
//
// Kernels (on the compute stream, in the schedule's order):
//   attn   forward: the embedding (block 0) or the previous MoE layer's I-Order and residual;
//          then x += Attention(LN1(x)). backward: the attention's backward (and the
//          embedding's at block 0), then the previous MoE layer's I-Order backward, packed
//          into its backward dispatch chunks.
//   gate   forward: LN2, Gate and Order, packed into the dispatch chunks. backward: Order's
//          and Gate's backward from the combined chunks, then LN2's.
//   moe.expert  the chunk's experts (label chunk -1 with several A2A chunks: every chunk's
//          rows at once, MoNTA's experts that wait for the whole dispatch).
//   head   forward: the last MoE layer's I-Order, final norm, LM head and loss. backward: the
//          head's, then the last MoE layer's I-Order backward, packed.
// A forward dispatch chunk carries, ahead of each destination's rows, the sender's full row
// counts for that destination's L experts (L int32), so the experts learn the layout with the
// rows; every other A2A's receive counts are known from that layout.
#include <array>
#include <functional>
#include <string>
#include <unordered_map>
#include <vector>

#include "nn/moe_transformer.h"
#include "rt/executor.h"
#include "sched/schedule.h"

namespace moecomm::rt {

class ModelBinding {
 public:
  // Throws moecomm::Error naming the op when this rank's part of the schedule has an op that no
  // kernel or buffer is registered for, or a layer the model does not have.
  ModelBinding(const sched::Schedule& schedule, int rank, nn::MoeTransformer& model);
  ModelBinding(const ModelBinding&) = delete;
  ModelBinding& operator=(const ModelBinding&) = delete;

  // Registers the kernels, buffers and after-op handlers with the executor (which must run
  // `schedule` and outlive nothing of this binding's).
  void bind(Executor& executor);
  // Before each run: the batch the forward reads.
  void start_step(const std::vector<int>& tokens, const std::vector<int>& targets, int seq_len);
  float loss() const { return loss_; }  // the last run's loss, as forward() returns it
  int64_t grad_bytes() const { return grad_bytes_; }  // AllReduced by the last run, this rank
  // Since construction: the rows this rank's forward dispatches sent to each EP member, and
  // how many dispatches (layers x runs) they add up (TrainResult::dispatch_bytes).
  const std::vector<int64_t>& dispatch_rows() const { return dispatch_rows_; }
  int64_t dispatches() const { return dispatches_; }

 private:
  enum class Role { kDispatch, kCombine, kDenseGrad, kExpertGrad };
  struct Slot {
    Role role;
    int layer, phase, chunk, parts;  // phase: 0 forward, 1 backward; parts: AllReduce pieces
  };
  // One MoE layer in one phase: the rows it dispatches and the chunks' buffers.
  struct MoeState {
    int chunks = 1;
    nn::Tensor send;      // forward: the Order's rows; backward: I-Order's gradient
    nn::Tensor combined;  // what came back, in the send layout
    std::vector<OpBuffer> dispatch, combine;
    bool has_layout = false;
    bool exchanged = false;  // the schedule has combine A2As (an EP group of more than one)
  };
  using Kernel = std::function<void(const sched::Label&)>;

  void register_kernels();
  void scan_ops();
  MoeState& state(int layer, int phase) { return moe_.at(size_t(layer))[size_t(phase)]; }
  nn::MoeLayer& moe(int layer) { return *layers_.at(size_t(layer)); }

  void attn(const sched::Label& label);
  void gate(const sched::Label& label);
  void expert(const sched::Label& label);
  void head(const sched::Label& label);

  void pack_forward(int layer);
  void pack_backward(int layer);
  void finish_forward(int layer);
  // Chunk i's dispatched rows, local-expert-major in chunk i's layout (learning the layout
  // from the forward's headers first).
  nn::Tensor received_rows(int layer, int phase, int chunk);
  void put_expert_output(int layer, int phase, int chunk, const nn::Tensor& rows);
  void assemble(int layer, int phase, int chunk);  // a combined chunk into `combined`
  void after(sched::OpId op);
  OpBuffer* buffer(sched::OpId op);
  void pack_grads(const Slot& slot, OpBuffer& buf);
  void unpack_grads(const Slot& slot, const OpBuffer& buf);

  const sched::Schedule& s_;
  int rank_;
  nn::MoeTransformer& model_;
  std::vector<nn::MoeLayer*> layers_;
  std::unordered_map<std::string, Kernel> kernels_;  // by label name
  std::unordered_map<sched::OpId, Slot> slots_;      // this rank's collectives
  std::unordered_map<sched::OpId, OpBuffer> grad_buffers_;
  std::vector<std::array<MoeState, 2>> moe_;
  std::vector<int> tokens_, targets_;
  int seq_len_ = 0;
  float loss_ = 0;
  int64_t grad_bytes_ = 0;
  std::vector<int64_t> dispatch_rows_;
  int64_t dispatches_ = 0;
};

}  // namespace moecomm::rt
