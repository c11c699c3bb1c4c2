#pragma once
// A small GPT-style MoE language model for `moecomm train`:
//   x = Embedding(tokens) (token + learned position)
//   L blocks:  x = x + Attention(LayerNorm(x));  x = x + MoE(LayerNorm(x))
//   loss = CrossEntropy(LmHead(LayerNorm(x)), targets) + aux_loss_weight * sum_l aux_l
// The LM head is untied (its own W [M, V], b [V]). Tokens are B sequences of length S,
// sequence-major [B * S]; attention is causal within each sequence.
//
// Parallelism: dense parameters (embedding, attention, layer norms, gates, head) are
// initialised from config.seed alone, so they are identical on every rank; they are
// data-parallel and the caller AllReduces (averages) their gradients across ranks. Each MoE
// layer is built by make_moe_layer(spec, exchange): this rank holds experts
// [rank L, (rank + 1) L) seeded by expert_seed(layer seed, global expert), so its weights equal
// those of one process holding all experts. An expert's gradient on its rank already sums
// the contributions of every rank's tokens (moe_layer.h); for the mean-over-ranks loss scale
// it by 1 / DP (scale_grad in adam.h). All MoE layers share the one exchange.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "nn/attention.h"
#include "nn/cross_entropy.h"
#include "nn/embedding.h"
#include "nn/layer_norm.h"
#include "nn/moe_layer.h"
#include "nn/moe_layer_factory.h"
#include "nn/param.h"
#include "nn/sample_moving_moe.h"
#include "nn/tensor_parallel.h"
#include "nn/token_exchange.h"

namespace moecomm::nn {

struct MoeTransformerConfig {
  int vocab = 64;
  int max_seq = 32;  // longest sequence (positional table rows)
  int hidden = 32;
  int heads = 2;
  int layers = 2;
  // Per MoE layer: experts, ffn_hidden, top_k, gate, expert, capacity_factor, ... are used;
  // hidden is taken from above and seed is derived per layer from config.seed.
  MoeLayerSpec moe{.hidden = 0, .ffn_hidden = 64, .experts = 4};
  float aux_loss_weight = 0.01f;
  float embedding_init_std = 0.1f;
  float head_init_std = 0.02f;
  uint64_t seed = 0;
  // Tensor parallelism: this rank's shard of every attention layer's heads (attention.h);
  // with tp_shards > 1 the model needs set_tensor_parallel() before forward.
  int tp_shard = 0, tp_shards = 1;
  // HybridEP (rt/hybrid_codec.h): each MoE layer holds its expert domain's experts, of
  // which this rank owns owned_count from local index owned_first; the others are copies
  // that travel in before every forward and are not in expert_params(). -1: owns all.
  int owned_first = 0, owned_count = -1;
};

class MoeTransformer {
 public:
  // The exchange must outlive the model; every rank of its EP group builds the same config
  // and calls forward and backward in step (each MoE layer exchanges tokens).
  MoeTransformer(const MoeTransformerConfig& config, TokenExchange& exchange);
  MoeTransformer(const MoeTransformer&) = delete;
  MoeTransformer& operator=(const MoeTransformer&) = delete;
  // The TP group that sums the attention shards' outputs and input gradients (must outlive
  // the model; every member calls forward and backward in step).
  void set_tensor_parallel(TensorParallelGroup* tp) { tp_ = tp; }

  // tokens, targets: [B * seq_len] (targets < 0 are ignored); seq_len in [1, max_seq].
  // Returns lm_loss() + aux_loss_weight * aux_loss().
  float forward(const std::vector<int>& tokens, const std::vector<int>& targets, int seq_len);
  // Accumulates (+=) the gradients of all parameters for the last forward's loss.
  // block_done(l) runs as soon as block l's gradients are final (blocks from last to first),
  // so their AllReduce can start while earlier blocks are still in backward (Lina, FSMoE).
  // experts_done(l) runs earlier, as soon as block l's MoE sublayer is through, before its
  // attention: HybridEP's copies' gradients can start home then, as the simulator has them.
  void backward(const std::function<void(int block)>& block_done = {},
                const std::function<void(int block)>& experts_done = {});

  // The stages forward() and backward() run on the residual stream x, for an executor that
  // runs each as the kernel of a schedule op (rt/model_binding.h). Forward: embed_forward,
  // then per block l attention_forward(l), the MoE layer on moe_input(l) and moe_forward_done;
  // then head_forward. Backward: head_backward, then per block from the last: the MoE layer's
  // backward from residual_grad(), moe_backward_done, attention_backward (which ends in the
  // embedding's backward at block 0). Under TP, these sum the attention shards over
  // set_tensor_parallel()'s group; the _partial and _done halves leave that to the caller.
  void embed_forward(const std::vector<int>& tokens, const std::vector<int>& targets, int seq_len);
  // A later pipeline stage's start in place of embed_forward: x is the previous stage's output
  // (its residual()); the targets are the micro-batch's, for the head on the last stage.
  // samples: the group's samples x's rows hold, as the previous stage's sample_ids() (NetMoE
  // moves them between ranks); empty: this rank's own, as embed_forward takes them.
  void stage_forward(const std::vector<int>& targets, int seq_len, Tensor x,
                     const std::vector<int>& samples = {});
  const Tensor& residual() const { return x_; }
  // A stage's backward start below the head: dx is the next stage's input gradient (its
  // residual_grad() after its first block's attention_backward).
  void stage_backward(Tensor dx) { dx_ = std::move(dx); }
  void attention_forward(int block);  // x += Attention(LN1(x)), summed over the TP group
  // attention_forward in two, for an executor that sums the TP shards itself: this rank's
  // heads' output, then x += that output summed over the TP group.
  Tensor attention_partial(int block);
  void attention_done(int block, const Tensor& attention_output);
  Tensor moe_input(int block);                                 // LN2(x)
  void moe_forward_done(int block, const Tensor& moe_output);  // x += the MoE output
  float head_forward();                                        // the loss, as forward's
  void head_backward();  // residual_grad() = d loss / d x at the last block's output
  const Tensor& residual_grad() const { return dx_; }
  void moe_backward_done(int block, const Tensor& moe_input_grad);  // dx += LN2's backward
  void attention_backward(int block);
  // attention_backward in two: this shard's input gradient, then LN1's backward of it summed
  // over the TP group (and the embedding's at block 0).
  Tensor attention_backward_partial(int block);
  void attention_backward_done(int block, const Tensor& input_grad);

  // NetMoE (placement=netmoe): from now on every MoE sublayer moves the samples to the
  // placement's ranks (sample_moving_moe.h) and the rest of the model follows them; the
  // targets move once, before the head. Throws Error unless the layers are dropless
  // token-choice. `exchange` is over the same EP group and must outlive the model.
  void move_samples(SampleExchange& exchange);
  // The same for an executor that runs the sublayers' stages itself (rt/netmoe_binding.h):
  // the EP group's size and this rank's member; per block, moving_begin (the stages'
  // forward_begin on the residual stream), the sublayer's stages, then moving_done; backward
  // moving_backward_begin and moving_backward_done; set_group_targets before head_forward.
  void move_samples(int ranks, int rank);
  SampleMovingMoe& moving(int block) { return *moving_.at(static_cast<size_t>(block)); }
  void moving_begin(int block, int chunks_fwd, int chunks_bwd);
  void moving_done(int block);  // x = the sublayer's output at the new samples
  void moving_backward_begin(int block);
  void moving_backward_done(int block);  // dx = its input gradient at the old samples
  // Every EP member's targets, member-major (B * S each): those of the samples this rank
  // holds at the head are taken from them.
  void set_group_targets(std::vector<int> targets) { group_targets_ = std::move(targets); }
  // Global ids (home EP rank * B + b) of this rank's samples after the last forward, one per
  // sequence of logits(); without move_samples always this rank's own.
  const std::vector<int>& sample_ids() const { return samples_; }
  // Mean cross-entropy of each of those samples (the last forward's logits and targets).
  std::vector<float> sample_lm_losses() const;

  float lm_loss() const { return lm_loss_; }    // cross-entropy of the last forward
  float aux_loss() const { return aux_loss_; }  // sum over MoE layers of their aux losses
  const Tensor& logits() const { return head_.logits(); }

  // Names: "embed.tok", "block<l>.ln1.gamma", "block<l>.attn.wqkv", "block<l>.moe.gate.wg",
  // "block<l>.moe.expert<e>.w1", "ln_f.gamma", "head.w", ... (pointers stay valid for the
  // model's lifetime; the order is the same on every rank).
  std::vector<Param*> dense_params();   // everything but experts: data-parallel
  std::vector<Param*> expert_params();  // this rank's own experts of every layer
  std::vector<Param*> params();         // dense then expert
  std::vector<MoeLayer*> moe_layers();  // per block: routing(), plan(), layout()
  // The parameters whose gradients are final at block_done(l): block l's, plus the final
  // layer norm and head for the last block and the embedding for block 0. Over all blocks
  // they are dense_params() and expert_params(), each once.
  std::vector<Param*> block_dense_params(int block);
  std::vector<Param*> block_expert_params(int block);
  void zero_grad();

  const MoeTransformerConfig& config() const { return config_; }

 private:
  struct Block;
  void group_block_params();
  std::vector<int> moved_targets(const std::vector<int>& group_targets) const;

  struct Block {
    LayerNorm ln1, ln2;
    CausalSelfAttention attn;
    std::unique_ptr<MoeLayer> moe;
  };

  TensorParallelGroup* tp_ = nullptr;
  MoeTransformerConfig config_;
  TokenExchange& exchange_;
  SampleExchange* moving_exchange_ = nullptr;
  std::vector<std::unique_ptr<SampleMovingMoe>> moving_;  // per block, with move_samples
  std::vector<int> samples_, targets_;                    // of the last forward
  std::vector<int> group_targets_;                        // set_group_targets
  int seq_len_ = 0;
  Tensor x_, dx_;  // the residual stream and its gradient
  Embedding embed_;
  std::vector<std::unique_ptr<Block>> blocks_;
  LayerNorm ln_f_;
  LmHead head_;
  std::vector<Param> dense_, expert_;
  std::vector<std::vector<Param*>> block_dense_, block_expert_;
  float lm_loss_ = 0.0f, aux_loss_ = 0.0f;
  bool has_forward_ = false;
};

}  // namespace moecomm::nn
