#include "rt/model_binding.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <optional>

#include "core/error.h"
#include "nn/bf16.h"
#include "nn/exchange_chunks.h"
#include "nn/exchange_permute.h"
#include "sched/hybrid_routing.h"

namespace moecomm::rt {
namespace {

using sched::OpId;
using sched::OpKind;

int phase_index(sched::Phase phase) {
  return phase == sched::Phase::kBackward ? 1 : 0;
}

// Rows a layout's counts give member j (its L blocks).
int64_t member_rows(const std::vector<int>& counts, int j, int local) {
  int64_t rows = 0;
  for (int l = 0; l < local; ++l) rows += counts[size_t(j * local + l)];
  return rows;
}

std::vector<int64_t> member_bytes(const std::vector<int>& counts, int members, int local,
                                  int64_t row_bytes) {
  std::vector<int64_t> out;
  for (int j = 0; j < members; ++j) out.push_back(member_rows(counts, j, local) * row_bytes);
  return out;
}

void append(std::vector<std::byte>& out, const void* data, size_t bytes) {
  const auto* p = static_cast<const std::byte*>(data);
  out.insert(out.end(), p, p + bytes);
}

nn::Tensor tensor_of(const std::byte* data, size_t bytes, int64_t cols) {
  const int64_t values = int64_t(bytes / sizeof(float));
  nn::Tensor t({cols > 0 ? values / cols : 0, cols});
  if (values > 0) std::memcpy(t.data(), data, size_t(values) * sizeof(float));
  return t;
}

nn::Tensor tensor_of(const std::vector<std::byte>& data, int64_t cols) {
  return tensor_of(data.data(), data.size(), cols);
}

std::vector<std::byte> bytes_of(const nn::Tensor& t) {
  std::vector<std::byte> out;
  append(out, t.data(), size_t(t.size()) * sizeof(float));
  return out;
}

// Blocks of `counts[j]` bytes each, back to back -> one tensor per block.
std::vector<nn::Tensor> split_blocks(const std::vector<std::byte>& data,
                                     const std::vector<int64_t>& counts, int64_t cols) {
  std::vector<nn::Tensor> out;
  size_t at = 0;
  for (int64_t c : counts) {
    out.push_back(tensor_of(data.data() + at, size_t(c), cols));
    at += size_t(c);
  }
  return out;
}

// `rows` into `buf` as member blocks of `counts` rows (fp32), with the member's header ahead of
// its rows when given.
void fill_blocks(OpBuffer& buf, const nn::Tensor& rows, const std::vector<int64_t>& counts,
                 const std::vector<std::vector<int32_t>>& headers) {
  const int64_t cols = rows.cols();
  buf.data.clear();
  buf.counts.clear();
  int64_t at = 0;
  for (size_t j = 0; j < counts.size(); ++j) {
    const size_t before = buf.data.size();
    if (!headers.empty()) append(buf.data, headers[j].data(), headers[j].size() * sizeof(int32_t));
    append(buf.data, rows.data() + at * cols, size_t(counts[j] * cols) * sizeof(float));
    at += counts[j];
    buf.counts.push_back(int64_t(buf.data.size() - before));
  }
}

// The collectives this binding gives buffers to.
bool has_buffer(sched::OpRole role) {
  using R = sched::OpRole;
  switch (role) {
    case R::kAttnTpAllReduce:
    case R::kDispatchA2A:
    case R::kDispatchEspAllGather:
    case R::kCombineEspReduceScatter:
    case R::kCombineEspAllReduce:
    case R::kCombineA2A:
    case R::kCombineTpAllGather:
    case R::kGradDenseAllReduce:
    case R::kGradExpertAllReduce:
    case R::kExpertTransferAllGather:
    case R::kExpertTransferGradReduceScatter:
    case R::kExpertTransferSharedAllReduce:
    case R::kPlacementCountsAllGather:
    case R::kPlacementAuxAllGather:
    case R::kPlacementTargetsAllGather:
      return true;
    default:
      return false;
  }
}

}  // namespace

ModelBinding::ModelBinding(const sched::Schedule& schedule, int rank, nn::MoeTransformer& model,
                           BindingOptions options)
    : s_(schedule),
      rank_(rank),
      model_(model),
      layers_(model.moe_layers()),
      cols_(model.config().hidden),
      hybrid_(std::move(options.hybrid)),
      bf16_rows_(options.bf16_rows) {
  moe_.resize(layers_.size());
  attn_tp_.assign(layers_.size(), {sched::kNone, sched::kNone});
  register_kernels();
  scan_ops();
  if (has_netmoe_) bind_netmoe(options.ranks_per_node);
  if (bf16_rows_ && (parts_ > 1 || hybrid_.codec || netmoe_ || moe_ops_beside_a2a()))
    throw Error("--bf16-a2a",
                "bf16 token rows run on the plain EP A2A only (no ESP/TP "
                "collectives, HybridEP or NetMoE)");
}

// Whether any layer has token collectives other than its A2As (ESP/TP gathers, reductions).
bool ModelBinding::moe_ops_beside_a2a() const {
  for (const auto& phases : moe_)
    for (const MoeState& st : phases)
      if (st.ops.gather || st.ops.reduce || st.ops.tp_gather) return true;
  return false;
}

// NetMoE's ops drive the layers' sample-moving stages (netmoe_binding.h), with the chunk
// counts the schedule has.
void ModelBinding::bind_netmoe(int ranks_per_node) {
  if (hybrid_.codec) throw Error("schedule runtime", "placement=netmoe moves no experts");
  std::vector<std::array<int, 2>> chunks;
  for (const auto& phases : moe_) chunks.push_back({phases[0].chunks, phases[1].chunks});
  const core::RankGroup group = a2a_group_.empty() ? core::RankGroup{rank_} : a2a_group_;
  netmoe_ = std::make_unique<NetMoeBinding>(model_, s_.world_size(), group, a2a_member_,
                                            ranks_per_node, std::move(chunks));
}

std::vector<int64_t> ModelBinding::meta_bytes() const {
  std::vector<int64_t> out = header_bytes_;
  if (netmoe_)
    for (size_t r = 0; r < out.size(); ++r) out[r] += netmoe_->meta_bytes().at(r);
  return out;
}

void ModelBinding::register_kernels() {
  using R = sched::OpRole;
  kernels_[R::kAttention] = [this](const sched::Label& l) { attn(l); };
  kernels_[R::kGate] = [this](const sched::Label& l) { gate(l); };
  kernels_[R::kExpert] = [this](const sched::Label& l) { expert(l); };
  kernels_[R::kLmHead] = [this](const sched::Label& l) { head(l); };
  kernels_[R::kPlacementSolve] = [this](const sched::Label& l) { netmoe_->solve(l.layer); };
  kernels_[R::kDispatchEspAllGatherCopy] = [this](const sched::Label& l) {
    place(l.layer, phase_index(l.phase), l.chunk);
  };
  kernels_[R::kCombineTpAllGatherCopy] = [this](const sched::Label& l) {
    assemble(l.layer, phase_index(l.phase), l.chunk);
  };
}

// Every op of this rank must have a kernel or a buffer; chunk and partition counts, the TP
// parts and which of the token path's ops exist are read off the schedule.
void ModelBinding::scan_ops() {
  using R = sched::OpRole;
  std::map<std::pair<R, int>, int> parts;
  for (OpId id : s_.ops_of(rank_)) {
    const sched::Op& op = s_.op(id);
    const sched::Label& label = s_.label(id);
    if (label.role != R::kLmHead && (label.layer < 0 || label.layer >= int(layers_.size())))
      throw Error("schedule runtime", s_.describe(id) + ": the model has " +
                                          std::to_string(layers_.size()) + " MoE layers");
    if (op.kind == OpKind::kCompute || op.kind == OpKind::kCopy) {
      if (!kernels_.count(label.role))
        throw Error("schedule runtime", s_.describe(id) + ": no kernel is registered for '" +
                                            std::string(label.name()) + "'");
    } else if (has_buffer(label.role)) {
      slots_[id] = {label.role, label.layer, phase_index(label.phase), label.chunk, 1};
      ++parts[{label.role, label.layer}];
      if (label.role == R::kAttnTpAllReduce)
        attn_tp_[size_t(label.layer)][size_t(slots_[id].phase)] = id;
      if (label.role == R::kDispatchEspAllGather) {
        parts_ = s_.collective(op.collective).size();
        part_ = op.member;
      }
      if (label.role == R::kDispatchA2A && a2a_size_ == 0) {
        map_members(s_.collective(op.collective), op.member);
        a2a_member_ = op.member;
      }
      if (hybrid_role(slots_[id].role) && !hybrid_.codec)
        throw Error("schedule runtime", s_.describe(id) + ": HybridEP's ops need its codec");
    } else {
      throw Error("schedule runtime", s_.describe(id) + ": no buffer is registered for '" +
                                          std::string(label.name()) + "'");
    }
    const sched::OpFamily f = sched::family(label.role);
    if (f == sched::OpFamily::kTokenPath || f == sched::OpFamily::kPlacement ||
        f == sched::OpFamily::kExpertTransfer)
      scan_moe_op(label);
    has_netmoe_ |= f == sched::OpFamily::kPlacement;
  }
  for (auto& [id, slot] : slots_) {
    const bool grad = slot.role == R::kGradDenseAllReduce || slot.role == R::kGradExpertAllReduce;
    if (grad) slot.parts = parts[{slot.role, slot.layer}];
    if (grad || slot.role == R::kAttnTpAllReduce || hybrid_role(slot.role)) own_buffers_[id];
  }
  for (auto& phases : moe_)
    for (MoeState& st : phases) st.chunk.resize(size_t(st.chunks));
}

void ModelBinding::scan_moe_op(const sched::Label& label) {
  using R = sched::OpRole;
  MoeState& st = state(label.layer, phase_index(label.phase));
  st.chunks = std::max(st.chunks, label.chunk + 1);
  MoeOps& o = st.ops;
  const R r = label.role;
  o.dispatch |= r == R::kDispatchA2A;
  o.gather |= r == R::kDispatchEspAllGather;
  o.gather_copy |= r == R::kDispatchEspAllGatherCopy;
  o.reduce |= r == R::kCombineEspReduceScatter || r == R::kCombineEspAllReduce;
  o.combine |= r == R::kCombineA2A;
  o.tp_gather |= r == R::kCombineTpAllGather;
  o.combine_copy |= r == R::kCombineTpAllGatherCopy;
}

void ModelBinding::bind(Executor& executor) {
  for (OpId id : s_.ops_of(rank_)) {
    const sched::Op& op = s_.op(id);
    if (op.kind != OpKind::kCompute && op.kind != OpKind::kCopy) continue;
    const sched::Label& label = s_.label(id);
    executor.set_kernel(id, [this, &label] { kernels_.at(label.role)(label); });
  }
  executor.set_buffers([this](OpId id) { return buffer(id); });
  executor.set_after([this](OpId id) { after(id); });
}

void ModelBinding::start_step(const std::vector<int>& tokens, const std::vector<int>& targets,
                              int seq_len) {
  tokens_ = tokens;
  targets_ = targets;
  seq_len_ = seq_len;
  grad_bytes_ = 0;
  header_bytes_.assign(size_t(s_.world_size()), 0);
  if (netmoe_) netmoe_->start_step(targets, seq_len);
  if (hybrid_.codec)  // from the last backward's AllReduced sum, before any expert is encoded
    for (int l = 0; l < hybrid_.codec->layers(); ++l) hybrid_.codec->refresh_shared(l);
  for (auto& phases : moe_)
    for (MoeState& st : phases) {
      st.has_layout = false;
      for (Chunk& c : st.chunk) c.placed = false;
    }
}

nn::ExchangeLayout ModelBinding::part_layout(const nn::ExchangeLayout& layout, int i, int n,
                                             int u) const {
  return nn::chunk_layout(nn::chunk_layout(layout, i, n), u, parts_);
}

// --- kernels

void ModelBinding::attn(const sched::Label& label) {
  const int l = label.layer, phase = phase_index(label.phase);
  if (phase == 0) {
    if (l == 0)
      model_.embed_forward(tokens_, targets_, seq_len_);
    else
      finish_forward(l - 1);
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
  if (l > 0) pack(l - 1, 1);
}

void ModelBinding::gate(const sched::Label& label) {
  const int l = label.layer;
  if (label.phase == sched::Phase::kForward) return pack(l, 0);
  if (netmoe_) return netmoe_->gate_backward(l);
  const nn::Tensor dx = moe(l).backward_end(state(l, 1).combined, model_.config().aux_loss_weight);
  model_.moe_backward_done(l, dx);
}

void ModelBinding::head(const sched::Label& label) {
  const int last = int(layers_.size()) - 1;
  if (label.phase == sched::Phase::kForward) {
    finish_forward(last);
    loss_ = model_.head_forward();
    return;
  }
  model_.head_backward();
  pack(last, 1);
}

void ModelBinding::expert(const sched::Label& label) {
  const int l = label.layer, phase = phase_index(label.phase);
  if (netmoe_) return netmoe_->expert(l, phase, label.chunk);
  nn::MoeLayer& layer = moe(l);
  MoeState& st = state(l, phase);
  auto run = [&](int i, int n, const nn::Tensor& rows) {
    return phase == 0 ? layer.forward_experts(i, n, rows) : layer.backward_experts(i, n, rows);
  };
  const int n = st.chunks;
  for (int i = 0; i < n; ++i)
    if ((label.chunk < 0 || label.chunk == i) && !st.chunk[size_t(i)].placed) place(l, phase, i);
  if (label.chunk >= 0 || n == 1) {
    const int i = std::max(label.chunk, 0);
    expert_output(l, phase, i, run(i, n, st.chunk[size_t(i)].expert_in));
    return;
  }
  // The experts wait for every chunk: they run once on the whole dispatched buffer.
  const nn::ExchangeLayout& layout = layer.layout();
  nn::Tensor all({layout.recv_rows(), cols_});
  for (int i = 0; i < n; ++i)
    nn::scatter_rows(all, st.chunk[size_t(i)].expert_in, recv_chunk_rows(layout, i, n));
  const nn::Tensor out = run(0, 1, all);
  for (int i = 0; i < n; ++i)
    expert_output(l, phase, i, nn::gather_rows(out, recv_chunk_rows(layout, i, n)));
}

// --- the MoE token path, chunk by chunk

// The rows to dispatch, in every chunk's buffer: this member's part of it (forward: behind
// the full counts for each destination).
void ModelBinding::pack(int l, int phase) {
  if (netmoe_) return phase == 0 ? netmoe_->gate_forward(l) : netmoe_->backward_begin(l);
  nn::MoeLayer& layer = moe(l);
  MoeState& st = state(l, phase);
  const int local = layer.local_experts(), ep = layer.num_experts() / local;
  std::vector<std::vector<int32_t>> headers;
  nn::ExchangeLayout layout;
  if (phase == 0) {
    st.send = layer.forward_begin(model_.moe_input(l));
    layout = {ep, local, layer.plan().counts, {}};
    headers.resize(size_t(ep));
    count_dispatch(layout.send_counts);
    for (int j = 0; j < ep; ++j)
      for (int e = 0; e < local; ++e)
        headers[size_t(j)].push_back(layout.send_counts[size_t(j * local + e)]);
  } else {
    st.send = layer.backward_begin(model_.residual_grad());
    layout = layer.layout();
  }
  const int64_t row_bytes = cols_ * int64_t(sizeof(float));
  for (int i = 0; i < st.chunks; ++i) {
    Chunk& c = st.chunk[size_t(i)];
    const nn::ExchangeLayout chunk = nn::chunk_layout(layout, i, st.chunks);
    const nn::ExchangeLayout part = nn::chunk_layout(chunk, part_, parts_);
    std::vector<int64_t> rows;
    for (int j = 0; j < ep; ++j) rows.push_back(member_rows(part.send_counts, j, local));
    const nn::Tensor mine = nn::take_send_chunk(nn::take_send_chunk(st.send, layout, i, st.chunks),
                                                chunk, part_, parts_);
    fill_blocks(c.dispatch, mine, rows, headers);
    if (st.ops.dispatch)
      for (int j = 0; j < int(headers.size()); ++j) {
        const int member = member_of_.empty() ? j : member_of_[size_t(j)];
        header_bytes_[size_t(a2a_group_[size_t(member)])] +=
            int64_t(headers[size_t(j)].size() * sizeof(int32_t));
      }
    c.dispatch.recv_counts.clear();  // forward: the headers tell the receivers
    if (phase == 1) c.dispatch.recv_counts = member_bytes(part.recv_counts, ep, local, row_bytes);
    if (!st.ops.dispatch) on_dispatched(l, phase, i);  // an EP group of one
  }
  st.combined = nn::Tensor({st.send.rows(), st.send.cols()});
}

void ModelBinding::finish_forward(int l) {
  if (netmoe_) return netmoe_->forward_done(l);
  model_.moe_forward_done(l, moe(l).forward_end(state(l, 0).combined));
}

// The A2A's rows (forward: learning the layout from the headers), to gather over the ESP
// group or to place.
void ModelBinding::on_dispatched(int l, int phase, int i) {
  nn::MoeLayer& layer = moe(l);
  MoeState& st = state(l, phase);
  Chunk& c = st.chunk[size_t(i)];
  const int local = layer.local_experts(), ep = layer.num_experts() / local;
  const size_t header = phase == 0 ? size_t(local) * sizeof(int32_t) : 0;
  if (c.dispatch.counts.size() != size_t(ep))
    throw Error("schedule runtime", "layer " + std::to_string(l) + " chunk " + std::to_string(i) +
                                        ": received from " +
                                        std::to_string(c.dispatch.counts.size()) + " of " +
                                        std::to_string(ep) + " EP members");
  std::vector<std::byte> rows;
  std::vector<int> recv(size_t(ep * local));
  size_t at = 0;
  for (int s = 0; s < ep; ++s) {
    if (header) std::memcpy(&recv[size_t(s * local)], c.dispatch.data.data() + at, header);
    append(rows, c.dispatch.data.data() + at + header,
           size_t(c.dispatch.counts[size_t(s)]) - header);
    at += size_t(c.dispatch.counts[size_t(s)]);
  }
  if (phase == 0 && !st.has_layout) {
    layer.set_layout({ep, local, layer.plan().counts, recv});
    st.has_layout = true;
  }
  if (!st.ops.gather) {
    c.parts = {tensor_of(rows, cols_)};
    return;
  }
  c.gather.data = std::move(rows);
  c.gather.counts.clear();
  for (int u = 0; u < parts_; ++u)
    c.gather.counts.push_back(part_layout(layer.layout(), i, st.chunks, u).recv_rows() * cols_ *
                              int64_t(sizeof(float)));
}

void ModelBinding::on_gathered(int l, int phase, int i) {
  Chunk& c = state(l, phase).chunk[size_t(i)];
  c.parts = split_blocks(c.gather.data, c.gather.counts, cols_);
}

// MoNTA's reordering copy: every part's rows into the chunk's local-expert-major layout.
void ModelBinding::place(int l, int phase, int i) {
  MoeState& st = state(l, phase);
  Chunk& c = st.chunk[size_t(i)];
  const nn::ExchangeLayout chunk = nn::chunk_layout(moe(l).layout(), i, st.chunks);
  if (parts_ == 1 || c.parts.size() == 1) {
    c.expert_in = nn::source_to_expert_major(c.parts.at(0), chunk);
  } else {
    c.expert_in = nn::Tensor({chunk.recv_rows(), cols_});
    for (int u = 0; u < parts_; ++u)
      nn::scatter_rows(
          c.expert_in,
          nn::source_to_expert_major(c.parts.at(size_t(u)), nn::chunk_layout(chunk, u, parts_)),
          nn::recv_chunk_rows(chunk, u, parts_));
  }
  c.placed = true;
}

// The experts' rows of chunk i (local-expert-major): per TP part, source-major, to reduce
// over the ESP group or to send back.
void ModelBinding::expert_output(int l, int phase, int i, const nn::Tensor& rows) {
  nn::MoeLayer& layer = moe(l);
  MoeState& st = state(l, phase);
  Chunk& c = st.chunk[size_t(i)];
  const nn::ExchangeLayout chunk = nn::chunk_layout(layer.layout(), i, st.chunks);
  const int parts = st.ops.gather ? parts_ : 1;
  std::vector<std::byte> data;
  std::vector<int64_t> counts;
  for (int u = 0; u < parts; ++u) {
    const nn::ExchangeLayout part = nn::chunk_layout(chunk, u, parts);
    const nn::Tensor mine =
        parts == 1 ? rows : nn::gather_rows(rows, recv_chunk_rows(chunk, u, parts));
    const std::vector<std::byte> b = bytes_of(nn::expert_to_source_major(mine, part));
    counts.push_back(int64_t(b.size()));
    data.insert(data.end(), b.begin(), b.end());
  }
  const nn::ExchangeLayout mine = part_layout(layer.layout(), i, st.chunks, part_);
  const int64_t row_bytes = cols_ * int64_t(sizeof(float));
  c.combine.counts = member_bytes(mine.recv_counts, chunk.ranks, chunk.local_experts, row_bytes);
  c.combine.recv_counts =
      member_bytes(mine.send_counts, chunk.ranks, chunk.local_experts, row_bytes);
  if (st.ops.reduce) {
    c.reduce.data = std::move(data);
    c.reduce.counts = parts > 1 ? counts : std::vector<int64_t>{};
    return;
  }
  c.combine.data = std::move(data);
  if (!st.ops.combine) on_combined(l, phase, i);
}

void ModelBinding::on_reduced(int l, int phase, int i) {
  MoeState& st = state(l, phase);
  Chunk& c = st.chunk[size_t(i)];
  c.combine.data = std::move(c.reduce.data);
  if (!st.ops.combine) on_combined(l, phase, i);
}

// This member's part of chunk i is back (in its send layout): gather the TP parts, or keep it.
void ModelBinding::on_combined(int l, int phase, int i) {
  MoeState& st = state(l, phase);
  Chunk& c = st.chunk[size_t(i)];
  if (st.ops.tp_gather) {
    c.tp_gather.data = std::move(c.combine.data);
    c.tp_gather.counts.clear();
    for (int u = 0; u < parts_; ++u)
      c.tp_gather.counts.push_back(part_layout(moe(l).layout(), i, st.chunks, u).send_rows() *
                                   cols_ * int64_t(sizeof(float)));
    return;
  }
  c.back = {tensor_of(c.combine.data, cols_)};
  if (!st.ops.combine_copy) assemble(l, phase, i);
}

void ModelBinding::on_tp_gathered(int l, int phase, int i) {
  MoeState& st = state(l, phase);
  Chunk& c = st.chunk[size_t(i)];
  c.back = split_blocks(c.tp_gather.data, c.tp_gather.counts, cols_);
  if (!st.ops.combine_copy) assemble(l, phase, i);
}

// MoNTA's reordering copy on the way back: every part's rows into the send layout.
void ModelBinding::assemble(int l, int phase, int i) {
  MoeState& st = state(l, phase);
  Chunk& c = st.chunk[size_t(i)];
  const nn::ExchangeLayout& layout = moe(l).layout();
  if (c.back.size() == 1) {
    nn::put_send_chunk(st.combined, c.back[0], layout, i, st.chunks);
    return;
  }
  const nn::ExchangeLayout chunk = nn::chunk_layout(layout, i, st.chunks);
  nn::Tensor rows({chunk.send_rows(), cols_});
  for (int u = 0; u < int(c.back.size()); ++u)
    nn::put_send_chunk(rows, c.back[size_t(u)], chunk, u, int(c.back.size()));
  nn::put_send_chunk(st.combined, rows, layout, i, st.chunks);
}

// --- buffers of the collectives and their epilogues

OpBuffer* ModelBinding::buffer(OpId id) {
  const auto it = slots_.find(id);
  if (it == slots_.end()) return nullptr;
  const Slot& slot = it->second;
  if (const auto op = netmoe_ ? netmoe_op(slot) : std::nullopt)
    return netmoe_->buffer(*op, slot.layer, slot.phase, slot.chunk);
  const size_t i = size_t(std::max(slot.chunk, 0));
  switch (slot.role) {
    case sched::OpRole::kDispatchA2A:
      return to_wire(to_members(state(slot.layer, slot.phase).chunk[i].dispatch),
                     block_header(slot));
    case sched::OpRole::kDispatchEspAllGather:
      return &state(slot.layer, slot.phase).chunk[i].gather;
    case sched::OpRole::kCombineEspReduceScatter:
    case sched::OpRole::kCombineEspAllReduce:
      return &state(slot.layer, slot.phase).chunk[i].reduce;
    case sched::OpRole::kCombineA2A:
      return to_wire(to_members(state(slot.layer, slot.phase).chunk[i].combine), 0);
    case sched::OpRole::kCombineTpAllGather:
      return &state(slot.layer, slot.phase).chunk[i].tp_gather;
    case sched::OpRole::kAttnTpAllReduce:
      return &own_buffers_.at(id);
    case sched::OpRole::kGradDenseAllReduce:
    case sched::OpRole::kGradExpertAllReduce: {
      OpBuffer& buf = own_buffers_.at(id);
      pack_grads(slot, buf);
      return &buf;
    }
    default:
      return hybrid_buffer(slot, own_buffers_.at(id));
  }
}

void ModelBinding::after(OpId id) {
  const auto it = slots_.find(id);
  if (it == slots_.end()) return;
  const Slot& s = it->second;
  if (const auto op = netmoe_ ? netmoe_op(s) : std::nullopt)
    return netmoe_->after(*op, s.layer, s.phase, s.chunk);
  const int i = std::max(s.chunk, 0);
  switch (s.role) {
    case sched::OpRole::kAttnTpAllReduce:
      return attn_done(s.layer, s.phase, tensor_of(own_buffers_.at(id).data, cols_));
    case sched::OpRole::kDispatchA2A:
      from_wire(state(s.layer, s.phase).chunk[size_t(i)].dispatch, block_header(s));
      from_members(state(s.layer, s.phase).chunk[size_t(i)].dispatch);
      return on_dispatched(s.layer, s.phase, i);
    case sched::OpRole::kDispatchEspAllGather:
      return on_gathered(s.layer, s.phase, i);
    case sched::OpRole::kCombineEspReduceScatter:
    case sched::OpRole::kCombineEspAllReduce:
      return on_reduced(s.layer, s.phase, i);
    case sched::OpRole::kCombineA2A:
      from_wire(state(s.layer, s.phase).chunk[size_t(i)].combine, 0);
      from_members(state(s.layer, s.phase).chunk[size_t(i)].combine);
      return on_combined(s.layer, s.phase, i);
    case sched::OpRole::kCombineTpAllGather:
      return on_tp_gathered(s.layer, s.phase, i);
    case sched::OpRole::kGradDenseAllReduce:
    case sched::OpRole::kGradExpertAllReduce:
      return unpack_grads(s, own_buffers_.at(id));
    default:
      return hybrid_after(s, own_buffers_.at(id));
  }
}

// NetMoE's part of a collective, if it has one.
std::optional<NetMoeBinding::Op> ModelBinding::netmoe_op(const Slot& slot) const {
  using Op = NetMoeBinding::Op;
  switch (slot.role) {
    case sched::OpRole::kDispatchA2A:
      return Op::kDispatch;
    case sched::OpRole::kCombineA2A:
      return Op::kCombine;
    case sched::OpRole::kPlacementCountsAllGather:
      return Op::kCounts;
    case sched::OpRole::kPlacementAuxAllGather:
      return Op::kAux;
    case sched::OpRole::kPlacementTargetsAllGather:
      return Op::kTargets;
    default:
      return std::nullopt;
  }
}

// --- bf16 rows on the wire

size_t ModelBinding::block_header(const Slot& slot) {
  return slot.phase == 0 ? size_t(moe(slot.layer).local_experts()) * sizeof(int32_t) : 0;
}

// Each block's fp32 rows as bf16 behind its `header` bytes (kept as they are).
OpBuffer* ModelBinding::to_wire(OpBuffer* buf, size_t header) const {
  if (!bf16_rows_) return buf;
  std::vector<std::byte> out;
  size_t at = 0;
  for (int64_t& c : buf->counts) {
    const size_t before = out.size(), n = (size_t(c) - header) / sizeof(float);
    append(out, buf->data.data() + at, header);
    nn::Tensor rows({int64_t(n), 1});
    if (n) std::memcpy(rows.data(), buf->data.data() + at + header, n * sizeof(float));
    const std::vector<uint16_t> half = nn::to_bf16(rows);
    append(out, half.data(), half.size() * sizeof(uint16_t));
    at += size_t(c);
    c = int64_t(out.size() - before);
  }
  for (int64_t& c : buf->recv_counts) c = int64_t(header) + (c - int64_t(header)) / 2;
  buf->data = std::move(out);
  return buf;
}

void ModelBinding::from_wire(OpBuffer& buf, size_t header) const {
  if (!bf16_rows_) return;
  std::vector<std::byte> out;
  size_t at = 0;
  for (int64_t& c : buf.counts) {
    const size_t before = out.size(), n = (size_t(c) - header) / sizeof(uint16_t);
    append(out, buf.data.data() + at, header);
    std::vector<uint16_t> half(n);
    if (n) std::memcpy(half.data(), buf.data.data() + at + header, n * sizeof(uint16_t));
    nn::Tensor rows({int64_t(n), 1});
    nn::from_bf16(half, rows);
    append(out, rows.data(), n * sizeof(float));
    at += size_t(c);
    c = int64_t(out.size() - before);
  }
  buf.data = std::move(out);
}

// --- HybridEP

// Exchange rank j (where sched::HybridRouting sends this member's rows for domain j) is that
// A2A member; nothing without expert transfer.
void ModelBinding::map_members(const sched::Collective& a2a, int member) {
  a2a_size_ = a2a.size();
  a2a_group_ = a2a.group;
  if (!hybrid_.codec) return;
  member_of_ = sched::HybridRouting(a2a_size_, hybrid_.domain, hybrid_.order, "hybrid_domain")
                   .destinations(member);
}

namespace {

// Blocks of `counts` bytes in `data` -> per block its bytes.
std::vector<std::vector<std::byte>> blocks_of(const std::vector<std::byte>& data,
                                              const std::vector<int64_t>& counts) {
  std::vector<std::vector<std::byte>> out;
  size_t at = 0;
  for (int64_t c : counts) {
    out.emplace_back(data.begin() + std::ptrdiff_t(at),
                     data.begin() + std::ptrdiff_t(at + size_t(c)));
    at += size_t(c);
  }
  return out;
}

}  // namespace

OpBuffer* ModelBinding::to_members(OpBuffer& buf) const {
  if (member_of_.empty()) return &buf;
  const auto blocks = blocks_of(buf.data, buf.counts);
  std::vector<int64_t> counts(size_t(a2a_size_), 0), recv(size_t(a2a_size_), 0);
  std::vector<const std::vector<std::byte>*> at(size_t(a2a_size_), nullptr);
  for (size_t j = 0; j < member_of_.size(); ++j) {
    const size_t m = size_t(member_of_[j]);
    counts[m] = buf.counts[j];
    if (!buf.recv_counts.empty()) recv[m] = buf.recv_counts[j];
    at[m] = &blocks[j];
  }
  buf.data.clear();
  for (const auto* b : at)
    if (b) buf.data.insert(buf.data.end(), b->begin(), b->end());
  buf.counts = std::move(counts);
  if (!buf.recv_counts.empty()) buf.recv_counts = std::move(recv);
  return &buf;
}

void ModelBinding::from_members(OpBuffer& buf) const {
  if (member_of_.empty()) return;
  const auto blocks = blocks_of(buf.data, buf.counts);
  std::vector<int64_t> counts;
  buf.data.clear();
  for (int m : member_of_) {
    counts.push_back(buf.counts[size_t(m)]);
    buf.data.insert(buf.data.end(), blocks[size_t(m)].begin(), blocks[size_t(m)].end());
  }
  buf.counts = std::move(counts);
}

OpBuffer* ModelBinding::hybrid_buffer(const Slot& slot, OpBuffer& buf) {
  HybridCodec& codec = *hybrid_.codec;
  if (slot.role == sched::OpRole::kExpertTransferAllGather) {
    buf.data = codec.encode(slot.layer);  // this step's experts, when the AllGather starts
    return &buf;
  }
  const std::vector<float> floats = slot.role == sched::OpRole::kExpertTransferGradReduceScatter
                                        ? codec.slot_grads(slot.layer)
                                        : codec.own_sum(slot.layer);
  buf.data.resize(floats.size() * sizeof(float));
  std::memcpy(buf.data.data(), floats.data(), buf.data.size());
  return &buf;
}

void ModelBinding::hybrid_after(const Slot& slot, const OpBuffer& buf) {
  HybridCodec& codec = *hybrid_.codec;
  if (slot.role == sched::OpRole::kExpertTransferAllGather)
    return codec.decode(slot.layer, buf.data);
  const std::span<const float> floats(reinterpret_cast<const float*>(buf.data.data()),
                                      buf.data.size() / sizeof(float));
  if (slot.role == sched::OpRole::kExpertTransferGradReduceScatter)
    return codec.take_grads(slot.layer, floats);
  codec.set_shared_sum(slot.layer, floats);
}

// The forward dispatch's rows by the EP member that owns their experts under plain EP
// (TrainResult::dispatch_bytes: the simulator applies HybridEP's pairs itself).
void ModelBinding::count_dispatch(const std::vector<int>& send_counts) {
  const int members = a2a_size_ > 0 ? a2a_size_ : 1;
  const int per_member = int(send_counts.size()) / members;
  dispatch_rows_.resize(size_t(members), 0);
  ++dispatches_;
  for (size_t e = 0; e < send_counts.size(); ++e) {
    const int position = int(e) / per_member;
    const int owner = hybrid_.order.empty() ? position : hybrid_.order[size_t(position)];
    dispatch_rows_[size_t(owner)] += send_counts[e];
  }
}

namespace {

std::vector<nn::Param*> grad_params(nn::MoeTransformer& model, bool dense, int layer) {
  return dense ? model.block_dense_params(layer) : model.block_expert_params(layer);
}

// Calls f(pointer, count) for the parts of the flattened gradients in [first, last).
template <class F>
void for_range(const std::vector<nn::Param*>& params, int64_t first, int64_t last, F f) {
  int64_t at = 0;
  for (nn::Param* p : params) {
    const int64_t n = p->grad->size(), lo = std::max(first, at), hi = std::min(last, at + n);
    if (lo < hi) f(p->grad->data() + (lo - at), hi - lo);
    at += n;
  }
}

std::pair<int64_t, int64_t> part_range(const std::vector<nn::Param*>& params, int part, int parts) {
  int64_t total = 0;
  for (nn::Param* p : params) total += p->grad->size();
  return {total * part / parts, total * (part + 1) / parts};
}

}  // namespace

void ModelBinding::pack_grads(const Slot& slot, OpBuffer& buf) {
  const auto params =
      grad_params(model_, slot.role == sched::OpRole::kGradDenseAllReduce, slot.layer);
  const auto [first, last] = part_range(params, std::max(slot.chunk, 0), slot.parts);
  buf.data.resize(size_t(last - first) * sizeof(float));
  std::byte* out = buf.data.data();
  for_range(params, first, last, [&](const float* p, int64_t n) {
    std::memcpy(out, p, size_t(n) * sizeof(float));
    out += n * int64_t(sizeof(float));
  });
  grad_bytes_ += int64_t(buf.data.size());
}

void ModelBinding::unpack_grads(const Slot& slot, const OpBuffer& buf) {
  const auto params =
      grad_params(model_, slot.role == sched::OpRole::kGradDenseAllReduce, slot.layer);
  const auto [first, last] = part_range(params, std::max(slot.chunk, 0), slot.parts);
  const std::byte* in = buf.data.data();
  for_range(params, first, last, [&](float* p, int64_t n) {
    std::memcpy(p, in, size_t(n) * sizeof(float));
    in += n * int64_t(sizeof(float));
  });
}

}  // namespace moecomm::rt
