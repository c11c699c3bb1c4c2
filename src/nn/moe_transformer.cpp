#include "nn/moe_transformer.h"

#include <string>

#include "core/error.h"

namespace moecomm::nn {
namespace {

// Seed of dense module `index` (splitmix64 of (seed, index)).
uint64_t derive(uint64_t seed, uint64_t index) {
  uint64_t z = seed + 0x9e3779b97f4a7c15ull * (index + 1) + 0x5851f42d4c957f2dull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

const MoeTransformerConfig& checked(const MoeTransformerConfig& c) {
  if (c.vocab <= 0 || c.max_seq <= 0 || c.hidden <= 0 || c.heads <= 0 || c.layers <= 0)
    throw Error("moe transformer", "vocab, max_seq, hidden, heads and layers must be positive");
  return c;
}

void append(std::vector<Param>& out, const std::string& prefix, std::vector<Param> params) {
  for (Param& p : params) {
    p.name = prefix + p.name;
    out.push_back(std::move(p));
  }
}

bool owns(const MoeTransformerConfig& c, int local_expert) {
  return c.owned_count < 0 ||
         (local_expert >= c.owned_first && local_expert < c.owned_first + c.owned_count);
}

std::vector<Param*> pointers(std::vector<Param>& params) {
  std::vector<Param*> out;
  for (Param& p : params) out.push_back(&p);
  return out;
}

}  // namespace

MoeTransformer::MoeTransformer(const MoeTransformerConfig& config, TokenExchange& exchange)
    : config_(checked(config)),
      exchange_(exchange),
      embed_(config.vocab, config.max_seq, config.hidden, derive(config.seed, 0),
             config.embedding_init_std),
      ln_f_(config.hidden),
      head_(config.hidden, config.vocab, derive(config.seed, 1), config.head_init_std) {
  append(dense_, "embed.", embed_.params());
  for (int l = 0; l < config.layers; ++l) {
    MoeLayerSpec spec = config.moe;
    spec.hidden = config.hidden;
    spec.seed = derive(config.seed, 1000 + 2 * static_cast<uint64_t>(l));
    auto block = std::make_unique<Block>(
        Block{LayerNorm(config.hidden), LayerNorm(config.hidden),
              CausalSelfAttention(config.hidden, config.heads,
                                  derive(config.seed, 1001 + 2 * static_cast<uint64_t>(l)),
                                  config.tp_shard, config.tp_shards),
              make_moe_layer(spec, exchange)});
    const std::string prefix = "block" + std::to_string(l) + ".";
    append(dense_, prefix + "ln1.", block->ln1.params());
    append(dense_, prefix + "attn.", block->attn.params());
    append(dense_, prefix + "ln2.", block->ln2.params());
    append(dense_, prefix + "moe.", block->moe->gate().params());
    MoeLayer& moe = *block->moe;
    for (int e = 0; e < moe.local_experts(); ++e) {
      if (!owns(config, e)) continue;
      append(expert_, prefix + "moe.expert" + std::to_string(moe.first_expert() + e) + ".",
             moe.expert(e).params());
    }
    blocks_.push_back(std::move(block));
  }
  append(dense_, "ln_f.", ln_f_.params());
  append(dense_, "head.", head_.params());
  group_block_params();
}

// Names tell the block: "block<l>." prefixes; ln_f and head join the last block, embed block 0.
void MoeTransformer::group_block_params() {
  const int last = config_.layers - 1;
  auto block_of = [&](const std::string& name) {
    if (name.rfind("embed.", 0) == 0) return 0;
    if (name.rfind("block", 0) != 0) return last;
    return std::stoi(name.substr(5, name.find('.') - 5));
  };
  block_dense_.assign(static_cast<size_t>(config_.layers), {});
  block_expert_.assign(static_cast<size_t>(config_.layers), {});
  for (Param& p : dense_) block_dense_[static_cast<size_t>(block_of(p.name))].push_back(&p);
  for (Param& p : expert_) block_expert_[static_cast<size_t>(block_of(p.name))].push_back(&p);
}

std::vector<Param*> MoeTransformer::block_dense_params(int block) {
  return block_dense_.at(static_cast<size_t>(block));
}

std::vector<Param*> MoeTransformer::block_expert_params(int block) {
  return block_expert_.at(static_cast<size_t>(block));
}

void MoeTransformer::embed_forward(const std::vector<int>& tokens, const std::vector<int>& targets,
                                   int seq_len) {
  if (targets.size() != tokens.size())
    throw Error("moe transformer", std::to_string(targets.size()) + " targets for " +
                                       std::to_string(tokens.size()) + " tokens");
  x_ = embed_.forward(tokens, seq_len);
  const int batch = static_cast<int>(tokens.size()) / seq_len;
  samples_.resize(static_cast<size_t>(batch));
  for (int b = 0; b < batch; ++b) samples_[static_cast<size_t>(b)] = exchange_.rank() * batch + b;
  seq_len_ = seq_len;
  targets_ = targets;
  aux_loss_ = 0.0f;
  has_forward_ = false;
}

void MoeTransformer::stage_forward(const std::vector<int>& targets, int seq_len, Tensor x,
                                   const std::vector<int>& samples) {
  const int batch = static_cast<int>(targets.size()) / seq_len;
  if (x.rows() != static_cast<int64_t>(targets.size()) || x.cols() != config_.hidden)
    throw Error("moe transformer", "a stage's input of " + std::to_string(x.rows()) + " x " +
                                       std::to_string(x.cols()) + " for " +
                                       std::to_string(targets.size()) + " tokens of hidden " +
                                       std::to_string(config_.hidden));
  if (!samples.empty() && samples.size() != static_cast<size_t>(batch))
    throw Error("moe transformer", "a stage's input holds " + std::to_string(samples.size()) +
                                       " sample ids for " + std::to_string(batch) + " samples");
  x_ = std::move(x);
  samples_.resize(static_cast<size_t>(batch));
  for (int b = 0; b < batch; ++b)
    samples_[static_cast<size_t>(b)] =
        samples.empty() ? exchange_.rank() * batch + b : samples[static_cast<size_t>(b)];
  seq_len_ = seq_len;
  targets_ = targets;
  aux_loss_ = 0.0f;
  has_forward_ = false;
}

Tensor MoeTransformer::attention_partial(int block) {
  Block& b = *blocks_.at(static_cast<size_t>(block));
  return b.attn.forward(b.ln1.forward(x_), seq_len_);
}

void MoeTransformer::attention_done(int, const Tensor& attention_output) {
  x_.add(attention_output);
}

void MoeTransformer::attention_forward(int block) {
  if (config_.tp_shards > 1 && !tp_)
    throw Error("moe transformer", "tp_shards > 1 needs set_tensor_parallel()");
  Tensor a = attention_partial(block);
  if (tp_) tp_->all_reduce_sum(a);  // Megatron's g: the row-parallel shards' partial outputs
  attention_done(block, a);
}

Tensor MoeTransformer::moe_input(int block) {
  return blocks_.at(static_cast<size_t>(block))->ln2.forward(x_);
}

void MoeTransformer::moe_forward_done(int block, const Tensor& moe_output) {
  x_.add(moe_output);
  aux_loss_ += blocks_.at(static_cast<size_t>(block))->moe->aux_loss();
}

float MoeTransformer::head_forward() {
  if (moving_exchange_) group_targets_ = moving_exchange_->all_gather(targets_);
  if (!moving_.empty()) targets_ = moved_targets(group_targets_);
  lm_loss_ = head_.forward(ln_f_.forward(x_), targets_);
  has_forward_ = true;
  return lm_loss_ + config_.aux_loss_weight * aux_loss_;
}

float MoeTransformer::forward(const std::vector<int>& tokens, const std::vector<int>& targets,
                              int seq_len) {
  embed_forward(tokens, targets, seq_len);
  for (size_t l = 0; l < blocks_.size(); ++l) {
    const int block = static_cast<int>(l);
    attention_forward(block);
    if (moving_exchange_) {  // NetMoE: the residual is inlined, x moves to the new samples
      x_ = moving_[l]->forward(x_, seq_len, samples_, *moving_exchange_);
      aux_loss_ += moving_[l]->aux_loss();
    } else {
      moe_forward_done(block, blocks_[l]->moe->forward(moe_input(block)));
    }
  }
  return head_forward();
}

void MoeTransformer::head_backward() {
  if (!has_forward_) throw Error("moe transformer", "backward needs a forward first");
  dx_ = ln_f_.backward(head_.backward());
}

void MoeTransformer::moe_backward_done(int block, const Tensor& moe_input_grad) {
  dx_.add(blocks_.at(static_cast<size_t>(block))->ln2.backward(moe_input_grad));
}

Tensor MoeTransformer::attention_backward_partial(int block) {
  return blocks_.at(static_cast<size_t>(block))->attn.backward(dx_);
}

void MoeTransformer::attention_backward_done(int block, const Tensor& input_grad) {
  dx_.add(blocks_.at(static_cast<size_t>(block))->ln1.backward(input_grad));
  if (block == 0) embed_.backward(dx_);
}

void MoeTransformer::attention_backward(int block) {
  Tensor d = attention_backward_partial(block);
  if (tp_) tp_->all_reduce_sum(d);  // Megatron's f: the shards' partial input gradients
  attention_backward_done(block, d);
}

void MoeTransformer::backward(const std::function<void(int block)>& block_done,
                              const std::function<void(int block)>& experts_done) {
  head_backward();
  for (int l = config_.layers - 1; l >= 0; --l) {
    Block& b = *blocks_[static_cast<size_t>(l)];
    if (moving_exchange_)
      dx_ = moving_[static_cast<size_t>(l)]->backward(dx_, config_.aux_loss_weight,
                                                      *moving_exchange_);
    else
      moe_backward_done(l, b.moe->backward(dx_, config_.aux_loss_weight));
    if (experts_done) experts_done(l);
    attention_backward(l);
    if (block_done) block_done(l);
  }
}

void MoeTransformer::move_samples(SampleExchange& exchange) {
  move_samples(exchange.ranks(), exchange.rank());
  moving_exchange_ = &exchange;
}

void MoeTransformer::move_samples(int ranks, int rank) {
  if (config_.moe.gate == GateKind::kExpertChoice)
    throw Error("placement=netmoe", "needs a token-choice gate, not expert choice");
  moving_.clear();
  for (size_t l = 0; l < blocks_.size(); ++l)
    moving_.push_back(
        std::make_unique<SampleMovingMoe>(*blocks_[l]->moe, blocks_[l]->ln2, static_cast<int>(l),
                                          config_.moe.capacity_factor <= 0.0f, ranks, rank));
  moving_exchange_ = nullptr;
}

void MoeTransformer::moving_begin(int block, int chunks_fwd, int chunks_bwd) {
  moving(block).forward_begin(x_, seq_len_, samples_, chunks_fwd, chunks_bwd);
}

void MoeTransformer::moving_done(int block) {
  x_ = moving(block).forward_end(samples_);
  aux_loss_ += moving(block).aux_loss();
}

void MoeTransformer::moving_backward_begin(int block) {
  moving(block).backward_begin(dx_);
}

void MoeTransformer::moving_backward_done(int block) {
  dx_ = moving(block).backward_end(config_.aux_loss_weight);
}

// The targets follow their samples once, at the end of the forward (the group's targets are
// small: B * S ints per rank).
std::vector<int> MoeTransformer::moved_targets(const std::vector<int>& all) const {
  const size_t need = samples_.size() * static_cast<size_t>(seq_len_);
  std::vector<int> out;
  out.reserve(need);
  for (int i : samples_) {
    if (static_cast<size_t>(i + 1) * static_cast<size_t>(seq_len_) > all.size())
      throw Error("moe transformer", "the group's targets do not cover sample " +
                                         std::to_string(i) + " (set_group_targets)");
    out.insert(out.end(), all.begin() + static_cast<int64_t>(i) * seq_len_,
               all.begin() + static_cast<int64_t>(i + 1) * seq_len_);
  }
  return out;
}

std::vector<float> MoeTransformer::sample_lm_losses() const {
  if (!has_forward_) throw Error("moe transformer", "sample losses need a forward first");
  std::vector<float> out;
  for (size_t b = 0; b < samples_.size(); ++b) {
    const int first = static_cast<int>(b) * seq_len_;
    const std::vector<int> t(targets_.begin() + first, targets_.begin() + first + seq_len_);
    out.push_back(cross_entropy(head_.logits().slice_rows(first, seq_len_), t).loss);
  }
  return out;
}

std::vector<Param*> MoeTransformer::dense_params() {
  return pointers(dense_);
}

std::vector<Param*> MoeTransformer::expert_params() {
  return pointers(expert_);
}

std::vector<Param*> MoeTransformer::params() {
  std::vector<Param*> all = dense_params();
  for (Param* p : expert_params()) all.push_back(p);
  return all;
}

std::vector<MoeLayer*> MoeTransformer::moe_layers() {
  std::vector<MoeLayer*> out;
  for (auto& b : blocks_) out.push_back(b->moe.get());
  return out;
}

void MoeTransformer::zero_grad() {
  for (Param& p : dense_) p.grad->fill(0.0f);
  for (Param& p : expert_) p.grad->fill(0.0f);
}

}  // namespace moecomm::nn
