#include "rt/token_path_binding.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "core/error.h"
#include "nn/exchange_permute.h"
#include "rt/bf16_wire.h"
#include "rt/row_bytes.h"

namespace moecomm::rt {
namespace {

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

}  // namespace

TokenPathBinding::TokenPathBinding(nn::MoeTransformer& model, TokenPathWiring wiring)
    : model_(model),
      layers_(model.moe_layers()),
      cols_(model.config().hidden),
      parts_(wiring.parts),
      part_(wiring.part),
      a2a_group_(std::move(wiring.a2a_group)),
      remap_(std::move(wiring.remap)),
      order_(std::move(wiring.order)),
      bf16_rows_(wiring.bf16_rows),
      world_(wiring.world),
      dedup_(wiring.dedup),
      moe_(layers_.size()) {
  for (size_t l = 0; l < moe_.size(); ++l)
    for (int phase = 0; phase < 2; ++phase) {
      MoeState& st = moe_[l][size_t(phase)];
      st.ops = wiring.ops.at(l)[size_t(phase)];
      st.chunk.resize(size_t(st.ops.chunks));
    }
}

void TokenPathBinding::add_kernels(std::map<sched::OpRole, Kernel>& kernels) {
  using R = sched::OpRole;
  kernels[R::kGate] = [this](const sched::Label& l) { gate(l); };
  kernels[R::kExpert] = [this](const sched::Label& l) { expert(l); };
  kernels[R::kDispatchEspAllGatherCopy] = [this](const sched::Label& l) {
    place(l.layer, phase_index(l.phase), l.chunk);
  };
  kernels[R::kCombineTpAllGatherCopy] = [this](const sched::Label& l) {
    assemble(l.layer, phase_index(l.phase), l.chunk);
  };
}

bool TokenPathBinding::has_buffer(sched::OpRole role) const {
  using R = sched::OpRole;
  switch (role) {
    case R::kDispatchA2A:
    case R::kDispatchEspAllGather:
    case R::kCombineEspReduceScatter:
    case R::kCombineEspAllReduce:
    case R::kCombineA2A:
    case R::kCombineTpAllGather:
      return true;
    default:
      return false;
  }
}

void TokenPathBinding::start_step(const std::vector<int>&, int) {
  header_bytes_.assign(size_t(world_), 0);
  for (auto& phases : moe_)
    for (MoeState& st : phases) {
      st.has_layout = false;
      for (Chunk& c : st.chunk) c.placed = false;
    }
}

nn::ExchangeLayout TokenPathBinding::part_layout(const nn::ExchangeLayout& layout, int i, int n,
                                                 int u) const {
  return nn::chunk_layout(nn::chunk_layout(layout, i, n), u, parts_);
}

// --- kernels

void TokenPathBinding::gate(const sched::Label& label) {
  const int l = label.layer;
  if (label.phase == sched::Phase::kForward) return pack(l, 0);
  const float aux = model_.config().aux_loss_weight;
  MoeState& st = state(l, 1);
  if (dedup_) count_meta(l);
  const nn::Tensor dx =
      dedup_ ? moe(l).backward_end_at_experts(summed_tokens(st), st.grad_row_weight, aux)
             : moe(l).backward_end(st.combined, aux);
  model_.moe_backward_done(l, dx);
}

void TokenPathBinding::expert(const sched::Label& label) {
  const int l = label.layer, phase = phase_index(label.phase);
  nn::MoeLayer& layer = moe(l);
  MoeState& st = state(l, phase);
  auto run = [&](int i, int n, const nn::Tensor& rows) {
    return phase == 0 ? layer.forward_experts(i, n, rows) : layer.backward_experts(i, n, rows);
  };
  const int n = st.ops.chunks;
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
void TokenPathBinding::pack(int l, int phase) {
  nn::MoeLayer& layer = moe(l);
  MoeState& st = state(l, phase);
  const int chunks = st.ops.chunks;
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
    st.send = dedup_ ? layer.backward_begin_at_experts(model_.residual_grad())
                     : layer.backward_begin(model_.residual_grad());
    layout = layer.layout();
  }
  const int64_t row_bytes = cols_ * int64_t(sizeof(float));
  for (int i = 0; i < chunks; ++i) {
    Chunk& c = st.chunk[size_t(i)];
    if (dedup_) {
      pack_keyed(l, phase, i, layout, headers);
      continue;
    }
    const nn::ExchangeLayout chunk = nn::chunk_layout(layout, i, chunks);
    const nn::ExchangeLayout part = nn::chunk_layout(chunk, part_, parts_);
    std::vector<int64_t> rows;
    for (int j = 0; j < ep; ++j) rows.push_back(member_rows(part.send_counts, j, local));
    const nn::Tensor mine =
        nn::take_send_chunk(nn::take_send_chunk(st.send, layout, i, chunks), chunk, part_, parts_);
    fill_blocks(c.dispatch, mine, rows, headers);
    if (st.ops.dispatch)
      for (int j = 0; j < int(headers.size()); ++j)
        header_bytes_[size_t(a2a_group_[size_t(remap_.member(j))])] +=
            int64_t(headers[size_t(j)].size() * sizeof(int32_t));
    c.dispatch.recv_counts.clear();  // forward: the headers tell the receivers
    if (phase == 1) c.dispatch.recv_counts = member_bytes(part.recv_counts, ep, local, row_bytes);
    if (!st.ops.dispatch) on_dispatched(l, phase, i);  // an EP group of one
  }
  if (!dedup_) {
    st.combined = nn::Tensor({st.send.rows(), st.send.cols()});
    return;
  }
  st.grad_row_weight.assign(size_t(layer.plan().rows()), 0.0f);
  st.tokens = layer.plan().tokens;
}

void TokenPathBinding::forward_done(int l) {
  MoeState& st = state(l, 0);
  model_.moe_forward_done(l, dedup_ ? moe(l).forward_end_at_experts(summed_tokens(st))
                                    : moe(l).forward_end(st.combined));
}

// The A2A's rows (forward: learning the layout from the headers), to gather over the ESP
// group or to place.
void TokenPathBinding::on_dispatched(int l, int phase, int i) {
  nn::MoeLayer& layer = moe(l);
  MoeState& st = state(l, phase);
  Chunk& c = st.chunk[size_t(i)];
  const int local = layer.local_experts(), ep = layer.num_experts() / local;
  const size_t header = block_header(l, phase);
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
  learn_layout(l, phase, recv);
  if (!st.ops.gather) {
    c.parts = {tensor_of(rows, cols_)};
    return;
  }
  c.gather.data = std::move(rows);
  c.gather.counts.clear();
  for (int u = 0; u < parts_; ++u)
    c.gather.counts.push_back(part_layout(layer.layout(), i, st.ops.chunks, u).recv_rows() * cols_ *
                              int64_t(sizeof(float)));
}

// Forward: the first chunk's headers give the layer its layout (every chunk carries the full
// counts).
void TokenPathBinding::learn_layout(int l, int phase, const std::vector<int>& recv) {
  nn::MoeLayer& layer = moe(l);
  MoeState& st = state(l, phase);
  if (phase != 0 || st.has_layout) return;
  const int local = layer.local_experts();
  layer.set_layout({layer.num_experts() / local, local, layer.plan().counts, recv});
  st.has_layout = true;
  if (dedup_) {
    st.weight = nn::Tensor({layer.layout().recv_rows(), 1});
    st.output = nn::Tensor({layer.layout().recv_rows(), cols_});
  }
}

void TokenPathBinding::on_gathered(int l, int phase, int i) {
  Chunk& c = state(l, phase).chunk[size_t(i)];
  c.parts = split_blocks(c.gather.data, c.gather.counts, cols_);
}

// MoNTA's reordering copy: every part's rows into the chunk's local-expert-major layout.
void TokenPathBinding::place(int l, int phase, int i) {
  MoeState& st = state(l, phase);
  Chunk& c = st.chunk[size_t(i)];
  const nn::ExchangeLayout chunk = nn::chunk_layout(moe(l).layout(), i, st.ops.chunks);
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
  if (dedup_) weigh_at_experts(l, phase, i);
}

// The experts' rows of chunk i (local-expert-major): per TP part, source-major, to reduce
// over the ESP group or to send back.
void TokenPathBinding::expert_output(int l, int phase, int i, const nn::Tensor& rows) {
  if (dedup_) return combine_keyed(l, phase, i, rows);
  nn::MoeLayer& layer = moe(l);
  MoeState& st = state(l, phase);
  Chunk& c = st.chunk[size_t(i)];
  const nn::ExchangeLayout chunk = nn::chunk_layout(layer.layout(), i, st.ops.chunks);
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
  const nn::ExchangeLayout mine = part_layout(layer.layout(), i, st.ops.chunks, part_);
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

void TokenPathBinding::on_reduced(int l, int phase, int i) {
  MoeState& st = state(l, phase);
  Chunk& c = st.chunk[size_t(i)];
  c.combine.data = std::move(c.reduce.data);
  if (!st.ops.combine) on_combined(l, phase, i);
}

// This member's part of chunk i is back (in its send layout): gather the TP parts, or keep it.
void TokenPathBinding::on_combined(int l, int phase, int i) {
  MoeState& st = state(l, phase);
  Chunk& c = st.chunk[size_t(i)];
  if (st.ops.tp_gather) {
    c.tp_gather.data = std::move(c.combine.data);
    c.tp_gather.counts.clear();
    for (int u = 0; u < parts_; ++u)
      c.tp_gather.counts.push_back(part_layout(moe(l).layout(), i, st.ops.chunks, u).send_rows() *
                                   cols_ * int64_t(sizeof(float)));
    return;
  }
  c.back = {tensor_of(c.combine.data, cols_)};
  if (!st.ops.combine_copy) assemble(l, phase, i);
}

void TokenPathBinding::on_tp_gathered(int l, int phase, int i) {
  MoeState& st = state(l, phase);
  Chunk& c = st.chunk[size_t(i)];
  c.back = split_blocks(c.tp_gather.data, c.tp_gather.counts, cols_);
  if (!st.ops.combine_copy) assemble(l, phase, i);
}

// MoNTA's reordering copy on the way back: every part's rows into the send layout.
void TokenPathBinding::assemble(int l, int phase, int i) {
  MoeState& st = state(l, phase);
  Chunk& c = st.chunk[size_t(i)];
  const nn::ExchangeLayout& layout = moe(l).layout();
  if (c.back.size() == 1) {
    nn::put_send_chunk(st.combined, c.back[0], layout, i, st.ops.chunks);
    return;
  }
  const nn::ExchangeLayout chunk = nn::chunk_layout(layout, i, st.ops.chunks);
  nn::Tensor rows({chunk.send_rows(), cols_});
  for (int u = 0; u < int(c.back.size()); ++u)
    nn::put_send_chunk(rows, c.back[size_t(u)], chunk, u, int(c.back.size()));
  nn::put_send_chunk(st.combined, rows, layout, i, st.ops.chunks);
}

// --- the collectives' buffers and epilogues

OpBuffer* TokenPathBinding::buffer(sched::OpRole role, int l, int phase, int chunk) {
  Chunk& c = state(l, phase).chunk[size_t(std::max(chunk, 0))];
  switch (role) {
    case sched::OpRole::kDispatchA2A:
      return to_wire(remap_.to_members(c.dispatch), block_header(l, phase), bf16_rows_[0]);
    case sched::OpRole::kDispatchEspAllGather:
      return &c.gather;
    case sched::OpRole::kCombineEspReduceScatter:
    case sched::OpRole::kCombineEspAllReduce:
      return &c.reduce;
    case sched::OpRole::kCombineA2A:
      return to_wire(remap_.to_members(c.combine), 0, bf16_rows_[1]);
    case sched::OpRole::kCombineTpAllGather:
      return &c.tp_gather;
    default:
      return nullptr;
  }
}

void TokenPathBinding::after(sched::OpRole role, int l, int phase, int chunk) {
  const int i = std::max(chunk, 0);
  Chunk& c = state(l, phase).chunk[size_t(i)];
  switch (role) {
    case sched::OpRole::kDispatchA2A:
      if (dedup_) return on_keyed_dispatch(l, phase, i);
      from_wire(c.dispatch, block_header(l, phase), bf16_rows_[0]);
      remap_.from_members(c.dispatch);
      return on_dispatched(l, phase, i);
    case sched::OpRole::kDispatchEspAllGather:
      return on_gathered(l, phase, i);
    case sched::OpRole::kCombineEspReduceScatter:
    case sched::OpRole::kCombineEspAllReduce:
      return on_reduced(l, phase, i);
    case sched::OpRole::kCombineA2A:
      if (dedup_) return on_keyed_combine(l, phase, i);
      from_wire(c.combine, 0, bf16_rows_[1]);
      remap_.from_members(c.combine);
      return on_combined(l, phase, i);
    case sched::OpRole::kCombineTpAllGather:
      return on_tp_gathered(l, phase, i);
    default:
      return;
  }
}

size_t TokenPathBinding::block_header(int l, int phase) {
  return phase == 0 ? size_t(moe(l).local_experts()) * sizeof(int32_t) : 0;
}

OpBuffer* TokenPathBinding::to_wire(OpBuffer* buf, size_t header, bool bf16) const {
  if (bf16) rows_to_bf16(*buf, header);
  return buf;
}

void TokenPathBinding::from_wire(OpBuffer& buf, size_t header, bool bf16) const {
  if (bf16) rows_from_bf16(buf, header);
}

// The forward dispatch's rows by the EP member that owns their experts under plain EP
// (TrainResult::dispatch_bytes: the simulator applies HybridEP's pairs itself).
void TokenPathBinding::count_dispatch(const std::vector<int>& send_counts) {
  const int members = a2a_group_.empty() ? 1 : int(a2a_group_.size());
  const int per_member = int(send_counts.size()) / members;
  dispatch_rows_.resize(size_t(members), 0);
  ++dispatches_;
  for (size_t e = 0; e < send_counts.size(); ++e) {
    const int position = int(e) / per_member;
    const int owner = order_.empty() ? position : order_[size_t(position)];
    dispatch_rows_[size_t(owner)] += send_counts[e];
  }
}

// --- a2a=dedup: rows with their tokens, the combine weights at the experts

// The bytes besides the rows (sizes, tokens, positions, headers, weights) are metadata, as
// the plain A2A's headers are: the layer's, both phases, once its backward is done (the
// A2As' epilogues run on their streams, this on the compute stream after them).
void TokenPathBinding::count_meta(int l) {
  for (MoeState& st : moe_.at(size_t(l)))
    for (Chunk& c : st.chunk) {
      for (const DedupSent& sent : c.sent)
        for (size_t m = 0; m < sent.meta_bytes.size() && m < a2a_group_.size(); ++m)
          header_bytes_[size_t(a2a_group_[m])] += sent.meta_bytes[m];
      c.sent.clear();
    }
}

// The chunks' sums per token, added in chunk order (whatever order their combines ended in).
nn::Tensor TokenPathBinding::summed_tokens(MoeState& st) {
  nn::Tensor out({st.tokens, cols_});
  for (Chunk& c : st.chunk) {
    if (c.token_sums.size() != size_t(out.size()))
      throw std::logic_error("a2a=dedup: a chunk's combine returned " +
                             std::to_string(c.token_sums.size()) + " values for " +
                             std::to_string(out.size()));
    float* into = out.data();
    for (size_t x = 0; x < c.token_sums.size(); ++x) into[x] += c.token_sums[x];
    c.token_sums.clear();
  }
  return out;
}

// Chunk i's rows with their tokens (a padding row: a key of its own, past the tokens) and,
// forward, their combine weights; forward, behind each destination's header.
void TokenPathBinding::pack_keyed(int l, int phase, int i, const nn::ExchangeLayout& layout,
                                  const std::vector<std::vector<int32_t>>& headers) {
  const nn::OrderPlan& plan = moe(l).plan();
  MoeState& st = state(l, phase);
  const int chunks = st.ops.chunks;
  const nn::ExchangeLayout chunk = nn::chunk_layout(layout, i, chunks);
  const std::vector<int> rows = nn::send_chunk_rows(layout, i, chunks);
  auto k = std::make_shared<KeyedRows>();
  k->cols = cols_;
  const nn::Tensor mine = nn::gather_rows(st.send, rows);
  k->rows.assign(mine.data(), mine.data() + mine.size());
  for (int j = 0; j < layout.ranks; ++j)
    k->counts.push_back(member_rows(chunk.send_counts, j, layout.local_experts));
  for (int r : rows) {
    const int t = plan.row_token[size_t(r)];
    k->keys.push_back(t >= 0 ? t : plan.tokens + r);
    if (phase == 0) k->scalars.push_back(plan.row_weight[size_t(r)]);
  }
  k->headers = headers;
  k->bf16 = bf16_rows_[0];
  Chunk& c = st.chunk[size_t(i)];
  c.dispatch = OpBuffer{};
  c.dispatch.keyed = std::move(k);
}

// What arrived: the rows (source-major, the experts' side of a plain EP path: no ESP gather),
// the layout from the headers (forward), the tokens and (forward) the weights.
void TokenPathBinding::on_keyed_dispatch(int l, int phase, int i) {
  MoeState& st = state(l, phase);
  Chunk& c = st.chunk[size_t(i)];
  KeyedRows& k = *c.dispatch.keyed;
  if (phase == 0) {
    const int local = moe(l).local_experts();
    std::vector<int> recv;
    for (size_t s = 0; s < k.counts.size(); ++s) {
      if (k.headers.size() != k.counts.size() || k.headers[s].size() != size_t(local))
        throw Error("schedule runtime", "layer " + std::to_string(l) + " chunk " +
                                            std::to_string(i) + ": member " + std::to_string(s) +
                                            "'s dispatch came without its expert counts");
      recv.insert(recv.end(), k.headers[s].begin(), k.headers[s].end());
    }
    learn_layout(l, phase, recv);
  }
  const int64_t rows = int64_t(k.keys.size());
  c.parts = {nn::Tensor({rows, cols_}, std::move(k.rows))};
  c.sent.push_back(k.sent);
  c.keys = std::move(k.keys);
  if (phase == 0) c.weight = nn::Tensor({rows, 1}, std::move(k.scalars));
  c.dispatch = OpBuffer{};
}

// Forward: the chunk's weights go local-expert-major, and into the full dispatched layout for
// the backward. Backward: each row's dy becomes weight * dy, and <output, dy> is the weight's
// gradient (nn::iorder_backward's, computed where the output is).
void TokenPathBinding::weigh_at_experts(int l, int phase, int i) {
  const nn::ExchangeLayout& layout = moe(l).layout();
  const int chunks = state(l, phase).ops.chunks;
  const nn::ExchangeLayout chunk = nn::chunk_layout(layout, i, chunks);
  const std::vector<int> full = nn::recv_chunk_rows(layout, i, chunks);
  MoeState& fwd = state(l, 0);
  Chunk& c = state(l, phase).chunk[size_t(i)];
  if (phase == 0) {
    c.weight = nn::source_to_expert_major(c.weight, chunk);
    nn::scatter_rows(fwd.weight, c.weight, full);
    return;
  }
  const nn::Tensor w = nn::gather_rows(fwd.weight, full);
  const nn::Tensor out = nn::gather_rows(fwd.output, full);
  c.grad_weight = nn::Tensor({c.expert_in.rows(), 1});
  for (int64_t r = 0; r < c.expert_in.rows(); ++r) {
    float* dy = c.expert_in.row(r);
    const float* o = out.row(r);
    double dot = 0;
    for (int64_t k = 0; k < cols_; ++k) dot += double(dy[k]) * o[k];
    c.grad_weight.row(r)[0] = float(dot);
    const float weight = w.row(r)[0];
    for (int64_t k = 0; k < cols_; ++k) dy[k] *= weight;
  }
}

// The experts' rows of chunk i back to their sources, to be summed per token: forward
// weighted (the unweighted outputs kept for the backward), backward with the weights'
// gradients beside them.
void TokenPathBinding::combine_keyed(int l, int phase, int i, const nn::Tensor& rows) {
  nn::MoeLayer& layer = moe(l);
  MoeState& st = state(l, phase);
  Chunk& c = st.chunk[size_t(i)];
  const nn::ExchangeLayout& layout = layer.layout();
  const nn::ExchangeLayout chunk = nn::chunk_layout(layout, i, st.ops.chunks);
  auto k = std::make_shared<KeyedRows>();
  nn::Tensor weighted = rows;
  if (phase == 0) {
    nn::scatter_rows(st.output, rows, nn::recv_chunk_rows(layout, i, st.ops.chunks));
    for (int64_t r = 0; r < weighted.rows(); ++r) {
      const float w = c.weight.row(r)[0];
      float* row = weighted.row(r);
      for (int64_t x = 0; x < cols_; ++x) row[x] *= w;
    }
  } else {
    const nn::Tensor g = nn::expert_to_source_major(c.grad_weight, chunk);
    k->scalars.assign(g.data(), g.data() + g.size());
  }
  const nn::Tensor back = nn::expert_to_source_major(weighted, chunk);
  k->cols = cols_;
  k->rows.assign(back.data(), back.data() + back.size());
  for (int j = 0; j < chunk.ranks; ++j)
    k->counts.push_back(member_rows(chunk.recv_counts, j, chunk.local_experts));
  k->keys = c.keys;
  k->bf16 = bf16_rows_[1];
  c.combine = OpBuffer{};
  c.combine.keyed = std::move(k);
  c.combine.tokens = layer.plan().tokens;
}

// Chunk i's sums per token add to the layer's; backward, the weights' gradients go to their
// rows of the send layout.
void TokenPathBinding::on_keyed_combine(int l, int phase, int i) {
  MoeState& st = state(l, phase);
  Chunk& c = st.chunk[size_t(i)];
  if (!c.combine.reduced)
    throw std::logic_error("a2a=dedup's combine left no sums for layer " + std::to_string(l));
  ReducedRows& r = *c.combine.reduced;
  c.sent.push_back(r.sent);
  c.token_sums = std::move(r.sums);
  if (phase == 1) {
    const std::vector<int> rows = nn::send_chunk_rows(moe(l).layout(), i, st.ops.chunks);
    if (r.scalars.size() != rows.size())
      throw Error("schedule runtime", "layer " + std::to_string(l) + " chunk " + std::to_string(i) +
                                          ": " + std::to_string(r.scalars.size()) +
                                          " weight gradients came back for " +
                                          std::to_string(rows.size()) + " rows");
    for (size_t x = 0; x < rows.size(); ++x) st.grad_row_weight[size_t(rows[x])] = r.scalars[x];
  }
  c.combine = OpBuffer{};
}

}  // namespace moecomm::rt
