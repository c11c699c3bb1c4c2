#include "rt/model_binding.h"

#include <cstring>
#include <map>

#include "core/error.h"
#include "nn/exchange_chunks.h"
#include "nn/exchange_permute.h"

namespace moecomm::rt {
namespace {

using sched::OpId;
using sched::OpKind;

int phase_index(sched::Phase phase) {
  return phase == sched::Phase::kBackward ? 1 : 0;
}

// Rows of `layout` sent to (or received from) member j in one direction.
int64_t member_rows(const std::vector<int>& counts, int j, int local) {
  int64_t rows = 0;
  for (int l = 0; l < local; ++l) rows += counts[size_t(j * local + l)];
  return rows;
}

void append(std::vector<std::byte>& out, const void* data, size_t bytes) {
  const auto* p = static_cast<const std::byte*>(data);
  out.insert(out.end(), p, p + bytes);
}

nn::Tensor tensor_of(const std::vector<std::byte>& data, int64_t cols) {
  const int64_t values = int64_t(data.size() / sizeof(float));
  nn::Tensor t({cols > 0 ? values / cols : 0, cols});
  if (values > 0) std::memcpy(t.data(), data.data(), size_t(values) * sizeof(float));
  return t;
}

// Rows `rows` of a [*, cols] tensor into `buf` as member blocks of `counts` rows (fp32),
// with the member's header ahead of its rows when given.
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

}  // namespace

ModelBinding::ModelBinding(const sched::Schedule& schedule, int rank, nn::MoeTransformer& model)
    : s_(schedule), rank_(rank), model_(model), layers_(model.moe_layers()) {
  moe_.resize(layers_.size());
  register_kernels();
  scan_ops();
}

void ModelBinding::register_kernels() {
  kernels_["attn"] = [this](const sched::Label& l) { attn(l); };
  kernels_["gate"] = [this](const sched::Label& l) { gate(l); };
  kernels_["moe.expert"] = [this](const sched::Label& l) { expert(l); };
  kernels_["head"] = [this](const sched::Label& l) { head(l); };
}

// Every op of this rank must have a kernel or a buffer; chunk and partition counts are read off
// the schedule (the most chunks any MoE op of the layer and phase names).
void ModelBinding::scan_ops() {
  static const std::map<std::string, Role> roles = {{"moe.dispatch.a2a", Role::kDispatch},
                                                    {"moe.combine.a2a", Role::kCombine},
                                                    {"grad.dense.allreduce", Role::kDenseGrad},
                                                    {"grad.expert.allreduce", Role::kExpertGrad}};
  std::map<std::pair<std::string, int>, int> parts;
  for (OpId id : s_.ops_of(rank_)) {
    const sched::Op& op = s_.op(id);
    const sched::Label& label = s_.label(id);
    const bool layered = label.name != "head";
    if (layered && (label.layer < 0 || label.layer >= int(layers_.size())))
      throw Error("schedule runtime", s_.describe(id) + ": the model has " +
                                          std::to_string(layers_.size()) + " MoE layers");
    if (op.kind == OpKind::kCompute) {
      if (!kernels_.count(label.name))
        throw Error("schedule runtime",
                    s_.describe(id) + ": no kernel is registered for '" + label.name + "'");
    } else if (const auto it = roles.find(label.name); it != roles.end()) {
      const int phase = phase_index(label.phase);
      slots_[id] = {it->second, label.layer, phase, label.chunk, 1};
      if (it->second == Role::kCombine) state(label.layer, phase).exchanged = true;
      ++parts[{label.name, label.layer}];
    } else {
      throw Error("schedule runtime",
                  s_.describe(id) + ": no buffer is registered for '" + label.name + "'");
    }
    if (label.name.rfind("moe.", 0) == 0) {
      MoeState& st = state(label.layer, phase_index(label.phase));
      st.chunks = std::max(st.chunks, label.chunk + 1);
    }
  }
  for (auto& [id, slot] : slots_) {
    if (slot.role != Role::kDenseGrad && slot.role != Role::kExpertGrad) continue;
    slot.parts = parts[{std::string(s_.label(id).name), slot.layer}];
    grad_buffers_[id];
  }
  for (auto& phases : moe_)
    for (MoeState& st : phases) {
      st.dispatch.resize(size_t(st.chunks));
      st.combine.resize(size_t(st.chunks));
    }
}

void ModelBinding::bind(Executor& executor) {
  for (OpId id : s_.ops_of(rank_)) {
    if (s_.op(id).kind != OpKind::kCompute) continue;
    const sched::Label& label = s_.label(id);
    executor.set_kernel(id, [this, &label] { kernels_.at(label.name)(label); });
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
  for (auto& phases : moe_)
    for (MoeState& st : phases) st.has_layout = false;
}

// --- kernels

void ModelBinding::attn(const sched::Label& label) {
  const int l = label.layer;
  if (label.phase == sched::Phase::kBackward) {
    model_.attention_backward(l);
    if (l > 0) pack_backward(l - 1);
    return;
  }
  if (l == 0)
    model_.embed_forward(tokens_, targets_, seq_len_);
  else
    finish_forward(l - 1);
  model_.attention_forward(l);
}

void ModelBinding::gate(const sched::Label& label) {
  const int l = label.layer;
  if (label.phase == sched::Phase::kForward) return pack_forward(l);
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
  pack_backward(last);
}

void ModelBinding::expert(const sched::Label& label) {
  const int l = label.layer, phase = phase_index(label.phase);
  nn::MoeLayer& layer = moe(l);
  auto run = [&](int i, int n, const nn::Tensor& rows) {
    return phase == 0 ? layer.forward_experts(i, n, rows) : layer.backward_experts(i, n, rows);
  };
  const int n = state(l, phase).chunks;
  if (label.chunk >= 0 || n == 1) {
    const int i = std::max(label.chunk, 0);
    put_expert_output(l, phase, i, run(i, n, received_rows(l, phase, i)));
    return;
  }
  // The experts wait for every chunk: they run once on the whole dispatched buffer.
  std::vector<nn::Tensor> chunks;
  for (int i = 0; i < n; ++i) chunks.push_back(received_rows(l, phase, i));
  const nn::ExchangeLayout& layout = layer.layout();
  nn::Tensor all({layout.recv_rows(), model_.config().hidden});
  for (int i = 0; i < n; ++i)
    nn::scatter_rows(all, chunks[size_t(i)], recv_chunk_rows(layout, i, n));
  const nn::Tensor out = run(0, 1, all);
  for (int i = 0; i < n; ++i)
    put_expert_output(l, phase, i, nn::gather_rows(out, recv_chunk_rows(layout, i, n)));
}

// --- the MoE token path's buffers

void ModelBinding::pack_forward(int l) {
  nn::MoeLayer& layer = moe(l);
  MoeState& st = state(l, 0);
  st.send = layer.forward_begin(model_.moe_input(l));
  const int local = layer.local_experts(), ep = layer.num_experts() / local;
  const nn::ExchangeLayout sent{ep, local, layer.plan().counts, {}};
  std::vector<std::vector<int32_t>> headers(static_cast<size_t>(ep));
  dispatch_rows_.resize(size_t(ep), 0);
  ++dispatches_;
  for (int j = 0; j < ep; ++j) dispatch_rows_[size_t(j)] += member_rows(sent.send_counts, j, local);
  for (int j = 0; j < ep; ++j)
    for (int e = 0; e < local; ++e)
      headers[size_t(j)].push_back(sent.send_counts[size_t(j * local + e)]);
  for (int i = 0; i < st.chunks; ++i) {
    const nn::ExchangeLayout chunk = nn::chunk_layout(sent, i, st.chunks);
    std::vector<int64_t> rows;
    for (int j = 0; j < ep; ++j) rows.push_back(member_rows(chunk.send_counts, j, local));
    fill_blocks(st.dispatch[size_t(i)], nn::take_send_chunk(st.send, sent, i, st.chunks), rows,
                headers);
    st.dispatch[size_t(i)].recv_counts.clear();  // the headers tell the receivers
  }
  st.combined = nn::Tensor({st.send.rows(), st.send.cols()});
}

void ModelBinding::pack_backward(int l) {
  nn::MoeLayer& layer = moe(l);
  MoeState& st = state(l, 1);
  st.send = layer.backward_begin(model_.residual_grad());
  const nn::ExchangeLayout& layout = layer.layout();
  const int local = layout.local_experts;
  const int64_t row_bytes = st.send.cols() * int64_t(sizeof(float));
  for (int i = 0; i < st.chunks; ++i) {
    const nn::ExchangeLayout chunk = nn::chunk_layout(layout, i, st.chunks);
    std::vector<int64_t> rows;
    OpBuffer& buf = st.dispatch[size_t(i)];
    for (int j = 0; j < layout.ranks; ++j) rows.push_back(member_rows(chunk.send_counts, j, local));
    fill_blocks(buf, nn::take_send_chunk(st.send, layout, i, st.chunks), rows, {});
    buf.recv_counts.clear();
    for (int j = 0; j < layout.ranks; ++j)
      buf.recv_counts.push_back(member_rows(chunk.recv_counts, j, local) * row_bytes);
  }
  st.combined = nn::Tensor({st.send.rows(), st.send.cols()});
}

void ModelBinding::finish_forward(int l) {
  model_.moe_forward_done(l, moe(l).forward_end(state(l, 0).combined));
}

nn::Tensor ModelBinding::received_rows(int l, int phase, int i) {
  nn::MoeLayer& layer = moe(l);
  MoeState& st = state(l, phase);
  const OpBuffer& buf = st.dispatch[size_t(i)];
  const int local = layer.local_experts(), ep = layer.num_experts() / local;
  const int64_t cols = model_.config().hidden;
  const size_t header = phase == 0 ? size_t(local) * sizeof(int32_t) : 0;
  if (buf.counts.size() != size_t(ep))
    throw Error("schedule runtime", "layer " + std::to_string(l) + " chunk " + std::to_string(i) +
                                        ": received from " + std::to_string(buf.counts.size()) +
                                        " of " + std::to_string(ep) + " EP members");
  std::vector<std::byte> rows;
  std::vector<int> recv(size_t(ep * local));
  size_t at = 0;
  for (int s = 0; s < ep; ++s) {
    if (header) std::memcpy(&recv[size_t(s * local)], buf.data.data() + at, header);
    append(rows, buf.data.data() + at + header, size_t(buf.counts[size_t(s)]) - header);
    at += size_t(buf.counts[size_t(s)]);
  }
  if (phase == 0 && !st.has_layout) {
    layer.set_layout({ep, local, layer.plan().counts, recv});
    st.has_layout = true;
  }
  const nn::ExchangeLayout chunk = nn::chunk_layout(layer.layout(), i, st.chunks);
  return nn::source_to_expert_major(tensor_of(rows, cols), chunk);
}

void ModelBinding::put_expert_output(int l, int phase, int i, const nn::Tensor& rows) {
  nn::MoeLayer& layer = moe(l);
  MoeState& st = state(l, phase);
  const nn::ExchangeLayout chunk = nn::chunk_layout(layer.layout(), i, st.chunks);
  const int local = chunk.local_experts;
  const int64_t row_bytes = rows.cols() * int64_t(sizeof(float));
  std::vector<int64_t> back;
  OpBuffer& buf = st.combine[size_t(i)];
  buf.recv_counts.clear();
  for (int j = 0; j < chunk.ranks; ++j) {
    back.push_back(member_rows(chunk.recv_counts, j, local));
    buf.recv_counts.push_back(member_rows(chunk.send_counts, j, local) * row_bytes);
  }
  fill_blocks(buf, nn::expert_to_source_major(rows, chunk), back, {});
  if (!st.exchanged) assemble(l, phase, i);  // an EP group of one: the rows stay here
}

void ModelBinding::assemble(int l, int phase, int i) {
  MoeState& st = state(l, phase);
  const nn::Tensor rows = tensor_of(st.combine[size_t(i)].data, st.send.cols());
  nn::put_send_chunk(st.combined, rows, moe(l).layout(), i, st.chunks);
}

// --- buffers of the collectives

OpBuffer* ModelBinding::buffer(OpId id) {
  const auto it = slots_.find(id);
  if (it == slots_.end()) return nullptr;
  const Slot& slot = it->second;
  switch (slot.role) {
    case Role::kDispatch:
      return &state(slot.layer, slot.phase).dispatch[size_t(std::max(slot.chunk, 0))];
    case Role::kCombine:
      return &state(slot.layer, slot.phase).combine[size_t(std::max(slot.chunk, 0))];
    default: {
      OpBuffer& buf = grad_buffers_.at(id);
      pack_grads(slot, buf);
      return &buf;
    }
  }
}

void ModelBinding::after(OpId id) {
  const auto it = slots_.find(id);
  if (it == slots_.end()) return;
  const Slot& slot = it->second;
  if (slot.role == Role::kCombine) {
    assemble(slot.layer, slot.phase, std::max(slot.chunk, 0));
  } else if (slot.role == Role::kDenseGrad || slot.role == Role::kExpertGrad) {
    unpack_grads(slot, grad_buffers_.at(id));
  }
}

namespace {

std::vector<nn::Param*> grad_params(nn::MoeTransformer& model, bool dense, int layer) {
  return dense ? model.block_dense_params(layer) : model.block_expert_params(layer);
}

// Calls f(param values' first index, count, pointer) for the part of the flattened gradients
// in [first, last).
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
  const auto params = grad_params(model_, slot.role == Role::kDenseGrad, slot.layer);
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
  const auto params = grad_params(model_, slot.role == Role::kDenseGrad, slot.layer);
  const auto [first, last] = part_range(params, std::max(slot.chunk, 0), slot.parts);
  const std::byte* in = buf.data.data();
  for_range(params, first, last, [&](float* p, int64_t n) {
    std::memcpy(p, in, size_t(n) * sizeof(float));
    in += n * int64_t(sizeof(float));
  });
}

}  // namespace moecomm::rt
