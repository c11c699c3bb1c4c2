#include "rt/model_binding.h"

#include <algorithm>
#include <cstring>
#include <map>

#include "core/dtype.h"
#include "core/error.h"
#include "rt/row_bytes.h"

namespace moecomm::rt {
namespace {

using sched::OpId;
using sched::OpKind;

bool stage_role(sched::OpRole r);

// The collectives this binding gives buffers to: the attention's TP AllReduce, and every
// collective of the MoE path (token path or NetMoE), the gradient sync, HybridEP's
// transfers and the pipeline's hand-offs. CP collectives have none.
bool has_buffer(sched::OpRole role) {
  using F = sched::OpFamily;
  const F f = sched::family(role);
  return role == sched::OpRole::kAttnTpAllReduce || f == F::kTokenPath || f == F::kPlacement ||
         f == F::kGradSync || f == F::kExpertTransfer || stage_role(role);
}

bool stage_role(sched::OpRole r) {
  using R = sched::OpRole;
  return r == R::kStageSendActivations || r == R::kStageRecvActivations ||
         r == R::kStageSendGrads || r == R::kStageRecvGrads;
}

bool grad_role(sched::OpRole r) {
  return r == sched::OpRole::kGradDenseAllReduce || r == sched::OpRole::kGradExpertAllReduce;
}

bool transfer_role(sched::OpRole r) {
  return sched::family(r) == sched::OpFamily::kExpertTransfer;
}

// The ops of the MoE layers' path (the token path's or NetMoE's).
bool moe_path_role(sched::OpRole r) {
  const sched::OpFamily f = sched::family(r);
  return f == sched::OpFamily::kTokenPath || f == sched::OpFamily::kPlacement;
}

}  // namespace

ModelBinding::ModelBinding(const sched::Schedule& schedule, int rank, nn::MoeTransformer& model,
                           BindingOptions options)
    : s_(schedule),
      rank_(rank),
      model_(model),
      stage_(options.stage),
      layers_(int(model.moe_layers().size())),
      cols_(model.config().hidden),
      grads_(model, options.grad_sources) {
  if (stage_.chunks.empty()) stage_.chunks = {{0, layers_}};
  for (OpId id : s_.ops_of(rank_)) {
    sched::Label label = s_.label(id);
    if (label.micro_batch != options.micro_batch && !(options.step_ops && label.micro_batch == -1))
      continue;
    if (label.layer >= 0) label.layer += stage_.layer_offset;
    labels_.emplace(id, std::move(label));
    ops_.push_back(id);
  }
  attn_tp_.assign(size_t(layers_), {sched::kNone, sched::kNone});
  bool has_netmoe = false;
  int a2a_member = 0;
  TokenPathWiring wiring = scan_ops(options.hybrid, has_netmoe, a2a_member);
  if (options.hybrid.codec) transfer_.emplace(*options.hybrid.codec);
  bind_path(std::move(wiring), has_netmoe, a2a_member, options);
  register_kernels(options.optimizer);
  check_ops();
}

// The token A2A `id`'s rows travel as its codec's dtype: fp32 as computed, or bf16
// (nn/bf16.h); every token A2A of the rank in its direction alike (`first`: the first seen,
// kNone before).
void ModelBinding::wire_rows(OpId id, OpId& first, bool& bf16) const {
  const core::Dtype dtype = s_.collective(s_.op(id).collective).codec.dtype;
  if (dtype != core::Dtype::kFp32 && dtype != core::Dtype::kBf16)
    throw Error("strategy: a2a_dtype", s_.describe(id) +
                                           ": the runtime sends token rows as fp32 or bf16, not " +
                                           std::string(core::to_string(dtype)));
  if (first == sched::kNone) {
    first = id;
    bf16 = dtype == core::Dtype::kBf16;
  } else if (bf16 != (dtype == core::Dtype::kBf16)) {
    throw Error("schedule runtime", s_.describe(id) + ": its rows travel as " +
                                        std::string(core::to_string(dtype)) + ", those of " +
                                        s_.describe(first) + " do not");
  }
}

// Collectives get their slots; chunk and partition counts, the TP parts, the A2A's group and
// which of the token path's ops exist are read off the schedule.
TokenPathWiring ModelBinding::scan_ops(const HybridBinding& hybrid, bool& has_netmoe,
                                       int& a2a_member) {
  using R = sched::OpRole;
  TokenPathWiring w;
  w.ops.resize(size_t(layers_));
  std::map<std::pair<R, int>, int> parts;
  bool has_a2a = false;
  // Per direction, the first token A2A: the dtype its rows travel as.
  std::array<OpId, 2> a2a_dtype = {sched::kNone, sched::kNone};
  for (OpId id : ops_) {
    const sched::Op& op = s_.op(id);
    const sched::Label& label = this->label(id);
    const bool step_wide =
        label.role == R::kLmHead || label.role == R::kOptimizer || stage_role(label.role);
    const auto holds = [&](const std::pair<int, int>& c) {
      return label.layer >= c.first && label.layer < c.second;
    };
    if (!step_wide && std::none_of(stage_.chunks.begin(), stage_.chunks.end(), holds))
      throw Error("schedule runtime", s_.describe(id) +
                                          ": not a block of this rank's pipeline "
                                          "stage (of " +
                                          std::to_string(layers_) + ")");
    if (op.kind != OpKind::kCompute && op.kind != OpKind::kCopy) {
      if (!has_buffer(label.role))
        throw Error("schedule runtime", s_.describe(id) + ": no buffer is registered for '" +
                                            std::string(label.name()) + "'");
      const Slot& slot =
          slots_[id] = {label.role, label.layer, phase_index(label.phase), label.chunk, 1};
      ++parts[{label.role, label.layer}];
      if (label.role == R::kAttnTpAllReduce) attn_tp_[size_t(label.layer)][size_t(slot.phase)] = id;
      if (label.role == R::kDispatchEspAllGather) {
        w.parts = s_.collective(op.collective).size();
        w.part = op.member;
      }
      if (label.role == R::kDispatchA2A || label.role == R::kCombineA2A) {
        const size_t direction = label.role == R::kDispatchA2A ? 0 : 1;
        wire_rows(id, a2a_dtype[direction], w.bf16_rows[direction]);
        if (s_.collective(op.collective).algorithm == sched::Algorithm::kDedup) w.dedup = true;
      }
      if (label.role == R::kDispatchA2A && !has_a2a) {
        const sched::Collective& a2a = s_.collective(op.collective);
        has_a2a = true;
        w.a2a_group = a2a.group;
        a2a_member = op.member;
        if (hybrid.codec) w.remap = HybridRemap(a2a.size(), hybrid.domain, hybrid.order, op.member);
      }
      if (transfer_role(label.role) && !hybrid.codec)
        throw Error("schedule runtime", s_.describe(id) + ": HybridEP's ops need its codec");
    }
    const sched::OpFamily f = sched::family(label.role);
    if (f == sched::OpFamily::kTokenPath || f == sched::OpFamily::kPlacement ||
        f == sched::OpFamily::kExpertTransfer)
      w.ops[size_t(label.layer)][size_t(phase_index(label.phase))].add(label);
    has_netmoe |= f == sched::OpFamily::kPlacement;
  }
  for (auto& [id, slot] : slots_) {
    const bool grad = grad_role(slot.role);
    if (grad) slot.parts = parts[{slot.role, slot.layer}];
    if (grad || slot.role == R::kAttnTpAllReduce || transfer_role(slot.role) ||
        stage_role(slot.role))
      own_buffers_[id];
  }
  w.order = hybrid.order;
  w.world = s_.world_size();
  return w;
}

// The MoE layers' path: NetMoE's when the schedule has its ops, the token path's otherwise.
void ModelBinding::bind_path(TokenPathWiring wiring, bool has_netmoe, int a2a_member,
                             const BindingOptions& options) {
  if (has_netmoe) {
    if (options.hybrid.codec) throw Error("schedule runtime", "placement=netmoe moves no experts");
    std::vector<std::array<int, 2>> chunks;
    for (const auto& phases : wiring.ops) chunks.push_back({phases[0].chunks, phases[1].chunks});
    const core::RankGroup group =
        wiring.a2a_group.empty() ? core::RankGroup{rank_} : wiring.a2a_group;
    netmoe_ = std::make_unique<NetMoeBinding>(model_, s_.world_size(), group, a2a_member,
                                              options.ranks_per_node, std::move(chunks));
    moe_ = netmoe_.get();
  }
  bool beside_a2a = false;
  for (const auto& phases : wiring.ops)
    for (const MoeOps& o : phases) beside_a2a |= o.beside_a2a();
  const bool bf16 = wiring.bf16_rows[0] || wiring.bf16_rows[1];
  if (bf16 && (wiring.parts > 1 || options.hybrid.codec || has_netmoe || beside_a2a))
    throw Error("strategy: a2a_dtype",
                "bf16 token rows run on the plain EP A2A only (no ESP/TP "
                "collectives, HybridEP or NetMoE)");
  if (netmoe_) return;
  token_path_ = std::make_unique<TokenPathBinding>(model_, std::move(wiring));
  moe_ = token_path_.get();
}

void ModelBinding::register_kernels(const std::function<void()>& optimizer) {
  using R = sched::OpRole;
  kernels_[R::kAttention] = [this](const sched::Label& l) { attn(l); };
  kernels_[R::kLmHead] = [this](const sched::Label& l) { head(l); };
  if (optimizer) kernels_[R::kOptimizer] = [optimizer](const sched::Label&) { optimizer(); };
  moe_->add_kernels(kernels_);
}

// Every op of this rank must have a kernel or a buffer.
void ModelBinding::check_ops() const {
  for (OpId id : ops_) {
    const sched::Op& op = s_.op(id);
    const sched::Label& label = this->label(id);
    if (op.kind == OpKind::kCompute || op.kind == OpKind::kCopy) {
      if (!kernels_.count(label.role))
        throw Error("schedule runtime", s_.describe(id) + ": no kernel is registered for '" +
                                            std::string(label.name()) + "'");
    } else if (moe_path_role(label.role) && !moe_->has_buffer(label.role)) {
      throw Error("schedule runtime", s_.describe(id) + ": no buffer is registered for '" +
                                          std::string(label.name()) + "'");
    }
  }
}

void ModelBinding::bind(Executor& executor) {
  bind_kernels(executor);
  executor.set_buffers([this](OpId id) { return buffer(id); });
  executor.set_after([this](OpId id) { after(id); });
}

void ModelBinding::bind_kernels(Executor& executor) {
  for (OpId id : ops_) {
    const sched::Op& op = s_.op(id);
    if (op.kind != OpKind::kCompute && op.kind != OpKind::kCopy) continue;
    const sched::Label& label = this->label(id);
    executor.set_kernel(id, [this, &label] { kernels_.at(label.role)(label); });
  }
}

void ModelBinding::start_step(const std::vector<int>& tokens, const std::vector<int>& targets,
                              int seq_len) {
  tokens_ = tokens;
  targets_ = targets;
  seq_len_ = seq_len;
  forward_block_ = -1;
  backward_chunk_ = int(stage_.chunks.size()) - 1;
  grads_.start_step();
  moe_->start_step(targets, seq_len);
  if (transfer_) transfer_->start_step();
}

const std::vector<int64_t>& ModelBinding::dispatch_rows() const {
  static const std::vector<int64_t> none;
  return token_path_ ? token_path_->dispatch_rows() : none;
}

// --- the dense kernels

bool ModelBinding::chunk_starts(int block) const {
  return std::any_of(stage_.chunks.begin(), stage_.chunks.end(),
                     [&](const std::pair<int, int>& c) { return c.first == block; });
}

void ModelBinding::attn(const sched::Label& label) {
  const int l = label.layer, phase = phase_index(label.phase);
  if (phase == 0) {
    if (l == 0)
      model_.embed_forward(tokens_, targets_, seq_len_);
    else if (!chunk_starts(l))
      moe_->forward_done(l - 1);  // a chunk's first block starts from the received x
    forward_block_ = l;
  }
  nn::Tensor partial =
      phase == 0 ? model_.attention_partial(l) : model_.attention_backward_partial(l);
  const OpId sum = attn_tp_[size_t(l)][size_t(phase)];
  if (sum == sched::kNone) return attn_done(l, phase, partial);
  own_buffers_.at(sum).data = bytes_of(partial);  // the TP AllReduce sums it in place
}

void ModelBinding::attn_done(int l, int phase, const nn::Tensor& summed) {
  if (phase == 0) return model_.attention_done(l, summed);
  model_.attention_backward_done(l, summed);
  if (!chunk_starts(l)) moe_->backward_begin(l - 1);
}

void ModelBinding::head(const sched::Label& label) {
  const int last = stage_.chunks.back().second - 1;
  if (label.phase == sched::Phase::kForward) {
    moe_->forward_done(last);
    loss_ = model_.head_forward();
    return;
  }
  model_.head_backward();
  --backward_chunk_;
  moe_->backward_begin(last);
}

// --- buffers of the collectives and their epilogues

OpBuffer* ModelBinding::buffer(OpId id) {
  const auto it = slots_.find(id);
  if (it == slots_.end()) return nullptr;
  const Slot& slot = it->second;
  if (slot.role == sched::OpRole::kAttnTpAllReduce) return &own_buffers_.at(id);
  if (grad_role(slot.role)) {
    OpBuffer& buf = own_buffers_.at(id);
    grads_.pack(slot.role, slot.layer, std::max(slot.chunk, 0), slot.parts, buf);
    return &buf;
  }
  if (transfer_role(slot.role))
    return transfer_->buffer(slot.role, slot.layer, own_buffers_.at(id));
  if (stage_role(slot.role)) return stage_buffer(slot.role, own_buffers_.at(id));
  return moe_->buffer(slot.role, slot.layer, slot.phase, slot.chunk);
}

// The pipeline's hand-offs carry the residual stream x (forward) and its gradient (backward)
// in fp32, whatever dtype the schedule prices them at. Under NetMoE the activations carry the
// ids of the samples their rows hold after them (int32, one per sample), since the stage's
// placements moved them.
OpBuffer* ModelBinding::stage_buffer(sched::OpRole role, OpBuffer& buf) {
  using R = sched::OpRole;
  const size_t rows_bytes = tokens_.size() * size_t(cols_) * sizeof(float);
  const size_t ids_bytes = netmoe_ ? tokens_.size() / size_t(seq_len_) * sizeof(int) : 0;
  switch (role) {
    case R::kStageSendActivations:
      moe_->forward_done(forward_block_);  // the chunk's last block
      buf.data = bytes_of(model_.residual());
      if (netmoe_) append(buf.data, model_.sample_ids().data(), ids_bytes);
      break;
    case R::kStageSendGrads:
      buf.data = bytes_of(model_.residual_grad());
      break;
    case R::kStageRecvActivations:
      buf.data.assign(rows_bytes + ids_bytes, std::byte{0});
      break;
    default:  // the gradients of this micro-batch's tokens' rows
      buf.data.assign(rows_bytes, std::byte{0});
  }
  return &buf;
}

void ModelBinding::stage_after(sched::OpRole role, const OpBuffer& buf) {
  if (role == sched::OpRole::kStageRecvActivations) {
    const size_t rows_bytes = tokens_.size() * size_t(cols_) * sizeof(float);
    std::vector<int> samples((buf.data.size() - rows_bytes) / sizeof(int));
    if (!samples.empty())
      std::memcpy(samples.data(), buf.data.data() + rows_bytes, samples.size() * sizeof(int));
    return model_.stage_forward(targets_, seq_len_, tensor_of(buf.data.data(), rows_bytes, cols_),
                                samples);
  }
  if (role == sched::OpRole::kStageRecvGrads) {
    model_.stage_backward(tensor_of(buf.data, cols_));
    moe_->backward_begin(stage_.chunks.at(size_t(backward_chunk_--)).second - 1);
  }
}

void ModelBinding::after(OpId id) {
  const auto it = slots_.find(id);
  if (it == slots_.end()) return;
  const Slot& s = it->second;
  if (s.role == sched::OpRole::kAttnTpAllReduce)
    return attn_done(s.layer, s.phase, tensor_of(own_buffers_.at(id).data, cols_));
  if (grad_role(s.role))
    return grads_.unpack(s.role, s.layer, std::max(s.chunk, 0), s.parts, own_buffers_.at(id));
  if (transfer_role(s.role)) return transfer_->after(s.role, s.layer, own_buffers_.at(id));
  if (stage_role(s.role)) return stage_after(s.role, own_buffers_.at(id));
  moe_->after(s.role, s.layer, s.phase, s.chunk);
}

}  // namespace moecomm::rt
