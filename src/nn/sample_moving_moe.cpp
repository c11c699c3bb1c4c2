#include "nn/sample_moving_moe.h"

#include <array>
#include <bit>
#include <cstring>
#include <stdexcept>
#include <string>

#include "core/error.h"
#include "nn/dropless_order.h"
#include "nn/exchange_chunks.h"
#include "nn/sample_moving_rows.h"

namespace moecomm::nn {
namespace {

constexpr int kMeta = SampleMovingMoe::kScatterMeta;

void put(double v, std::vector<int>& out) {
  for (int x : std::bit_cast<std::array<int, 2>>(v)) out.push_back(x);
}

double take(const std::vector<int>& in, size_t& at) {
  const std::array<int, 2> x{in.at(at), in.at(at + 1)};
  at += 2;
  return std::bit_cast<double>(x);
}

// A row and its ints travel in one A2A (one latency, as the simulator's one A2A per scatter
// and gather): the ints ride bit for bit as k trailing fp32 columns.
Tensor with_ints(const Tensor& rows, const std::vector<int>& ints, int k) {
  if (static_cast<int64_t>(ints.size()) != rows.rows() * k)
    throw std::logic_error("netmoe: " + std::to_string(ints.size()) + " ints for " +
                           std::to_string(rows.rows()) + " rows of " + std::to_string(k));
  const int64_t cols = rows.cols();
  Tensor out({rows.rows(), cols + k});
  for (int64_t r = 0; r < rows.rows(); ++r) {
    std::copy(rows.row(r), rows.row(r) + cols, out.row(r));
    std::memcpy(out.row(r) + cols, ints.data() + r * k, static_cast<size_t>(k) * sizeof(int));
  }
  return out;
}

// Undoes with_ints: the rows, and their ints into `ints`.
Tensor split_ints(const Tensor& joined, int k, std::vector<int>& ints) {
  const int64_t cols = joined.cols() - k;
  Tensor out({joined.rows(), cols});
  ints.resize(static_cast<size_t>(joined.rows() * k));
  for (int64_t r = 0; r < joined.rows(); ++r) {
    std::copy(joined.row(r), joined.row(r) + cols, out.row(r));
    std::memcpy(ints.data() + r * k, joined.row(r) + cols, static_cast<size_t>(k) * sizeof(int));
  }
  return out;
}

// A fresh layer norm with ln's parameters (LN2 on the expert side, one per chunk: it is
// row-wise, so chunks see exactly the rows' values).
LayerNorm copy_of(LayerNorm& ln) {
  std::vector<Param> shared = ln.params();
  LayerNorm out(static_cast<int>(shared.front().value->size()));
  std::vector<Param> mine = out.params();
  for (size_t i = 0; i < mine.size(); ++i) *mine[i].value = *shared[i].value;
  return out;
}

}  // namespace

void SampleExchange::pipeline(int chunks, const ChunkStage& send, const ChunkStage& work,
                              const ChunkStage& recv) {
  for (int i = 0; i < chunks; ++i) {
    send(i);
    work(i);
    recv(i);
  }
}

SampleMovingMoe::SampleMovingMoe(MoeLayer& moe, LayerNorm& ln2, int layer, bool dropless, int ranks,
                                 int rank)
    : moe_(moe), ln2_(ln2), layer_(layer), ranks_(ranks), rank_(rank) {
  // Each token's residual rides on its first slot: only exact when no slot is dropped.
  if (!dropless)
    throw Error("placement=netmoe",
                "expert residual inlining needs the dropless layout (capacity_factor 0)");
  if (ranks * moe.local_experts() != moe.num_experts())
    throw Error("placement=netmoe", "the sample exchange's EP size does not match the layer's");
}

Tensor SampleMovingMoe::forward(const Tensor& h, int seq_len, std::vector<int>& samples,
                                SampleExchange& exchange) {
  forward_begin(h, seq_len, samples, exchange.chunks(false), exchange.chunks(true));
  set_aux(exchange.all_gather(aux_bits_));
  exchange.submit_placement(layer_, samples, sample_counts_);  // Alg. 1 line 9: in background
  const std::vector<int> per_member(static_cast<size_t>(ranks_), moe_.local_experts());
  set_layout(exchange.ints(plan_.counts, per_member, "netmoe.scatter.counts", per_member));
  auto run = [&exchange](Rows r, const char* label) {
    Tensor got = exchange.rows(r.rows, r.send, r.recv, label, r.meta_cols);
    return std::pair{std::move(got), std::move(r.recv)};
  };
  exchange.pipeline(
      chunks_fwd_,
      [&](int i) { scatter_received(i, run(scatter_send(i), "netmoe.scatter").first); },
      [&](int i) { expert_chunk(i); },
      [&](int i) {
        if (i == 0) set_placement(exchange.collect_placement(layer_));
        auto [rows, recv] = run(gather_send(i), "netmoe.gather");
        gather_received(rows, recv);
      });
  return forward_end(samples);
}

Tensor SampleMovingMoe::backward(const Tensor& dy, float aux_grad, SampleExchange& exchange) {
  backward_begin(dy);
  auto run = [&exchange](Rows r, const char* label) {
    return exchange.rows(r.rows, r.send, r.recv, label, r.meta_cols);
  };
  exchange.pipeline(
      chunks_bwd_, [&](int j) { dy_received(j, run(dy_send(j), "netmoe.gather.backward")); },
      [&](int j) { backward_expert(j); },
      [&](int j) { dh_received(j, run(dh_send(j), "netmoe.scatter.backward")); });
  return backward_end(aux_grad);
}

void SampleMovingMoe::forward_begin(const Tensor& h, int seq_len, const std::vector<int>& samples,
                                    int chunks_fwd, int chunks_bwd) {
  const int tokens = static_cast<int>(h.rows());
  if (seq_len <= 0 || tokens != static_cast<int>(samples.size()) * seq_len)
    throw Error("sample moving moe", std::to_string(tokens) + " rows for " +
                                         std::to_string(samples.size()) + " samples of " +
                                         std::to_string(seq_len) + " tokens");
  if (chunks_fwd < 1 || chunks_bwd < 1) throw Error("sample moving moe", "chunks must be >= 1");
  routing_ = moe_.gate().forward(ln2_.forward(h));  // the gate needs LN2(h) here
  if (routing_.expert_choice)
    throw Error("placement=netmoe", "needs a token-choice gate (expert choice drops tokens)");
  seq_len_ = seq_len;
  tokens_ = tokens;
  chunks_fwd_ = chunks_fwd;
  chunks_bwd_ = chunks_bwd;
  samples_ = samples;
  aux_begin(samples);
  plan_ = DroplessOrder().plan(routing_);
  const int experts = moe_.num_experts();
  sample_counts_.assign(samples.size() * static_cast<size_t>(experts), 0);  // NetMoE Eq. 2
  meta_.clear();
  std::vector<char> seen(static_cast<size_t>(tokens), 0);
  for (int e = 0; e < experts; ++e)
    for (int r = plan_.offsets[static_cast<size_t>(e)];
         r < plan_.offsets[static_cast<size_t>(e) + 1]; ++r) {
      const int t = plan_.row_token[static_cast<size_t>(r)];
      ++sample_counts_[static_cast<size_t>(t / seq_len * experts + e)];
      meta_.push_back(samples[static_cast<size_t>(t / seq_len)] * seq_len + t % seq_len);
      meta_.push_back(seen[static_cast<size_t>(t)] ? 0 : 1);
      meta_.push_back(std::bit_cast<int>(plan_.row_weight[static_cast<size_t>(r)]));
      seen[static_cast<size_t>(t)] = 1;
    }
  send_ = order_rows(plan_, h);
  layout_ = ExchangeLayout{ranks_, moe_.local_experts(), plan_.counts, {}};  // recv: set_layout
  y_ = Tensor({tokens, h.cols()});
  got_rows_.assign(static_cast<size_t>(chunks_fwd_), {});
  z_.assign(static_cast<size_t>(chunks_fwd_), {});
  got_meta_.assign(static_cast<size_t>(chunks_fwd_), {});
  rows_.assign(static_cast<size_t>(chunks_fwd_), {});
  place_.clear();
  has_forward_ = false;
}

// The baseline's aux loss with samples moved: per home rank h, the sums of AuxStats over the
// tokens of h's samples, wherever they sit; each member adds those it holds and all-gathers
// them (P (1 + 2E) doubles), then every member sums the same values in member order.
void SampleMovingMoe::aux_begin(const std::vector<int>& samples) {
  Gate& gate = moe_.gate();
  if (!gate.groups_aux())
    throw Error("placement=netmoe", "the gate's aux loss cannot be computed per home rank");
  const int experts = moe_.num_experts();
  const int batch = static_cast<int>(samples.size());
  aux_home_.assign(static_cast<size_t>(routing_.tokens), 0);
  for (int t = 0; t < routing_.tokens; ++t)
    aux_home_[static_cast<size_t>(t)] = samples[static_cast<size_t>(t / seq_len_)] / batch;
  std::vector<AuxStats> mine(static_cast<size_t>(ranks_), AuxStats(experts));
  gate.add_aux_stats(aux_home_, mine);
  aux_bits_.clear();
  for (const AuxStats& s : mine) {
    put(s.tokens, aux_bits_);
    for (int e = 0; e < experts; ++e) put(s.count[static_cast<size_t>(e)], aux_bits_);
    for (int e = 0; e < experts; ++e) put(s.value[static_cast<size_t>(e)], aux_bits_);
  }
}

void SampleMovingMoe::set_aux(const std::vector<int>& all) {
  const int experts = moe_.num_experts();
  if (all.size() != aux_bits_.size() * static_cast<size_t>(ranks_))
    throw Error("sample moving moe", "the aux AllGather returned " + std::to_string(all.size()) +
                                         " ints, expected " +
                                         std::to_string(aux_bits_.size() * size_t(ranks_)));
  aux_stats_.assign(static_cast<size_t>(ranks_), AuxStats(experts));
  size_t at = 0;
  for (int m = 0; m < ranks_; ++m)
    for (AuxStats& s : aux_stats_) {
      AuxStats part(experts);
      part.tokens = take(all, at);
      for (double& c : part.count) c = take(all, at);
      for (double& v : part.value) v = take(all, at);
      s.add(part);
    }
  routing_.aux_loss = moe_.gate().aux_of(aux_stats_[static_cast<size_t>(rank_)]);
}

// The scatter's layout (what each member sends this one, L ints per member) and the expert
// side's canonical rows.
void SampleMovingMoe::set_layout(const std::vector<int>& recv_counts) {
  const int local = moe_.local_experts();
  if (recv_counts.size() != static_cast<size_t>(ranks_ * local))
    throw Error("sample moving moe", "the scatter's layout needs " +
                                         std::to_string(ranks_ * local) + " counts, got " +
                                         std::to_string(recv_counts.size()));
  layout_ = ExchangeLayout{ranks_, local, plan_.counts, recv_counts};
  const int rows = layout_.recv_rows();
  in_ = Received{Tensor({rows, ln2_.params().front().value->size()}),
                 {},
                 canonical_experts(layout_),
                 std::vector<int>(static_cast<size_t>(rows)),
                 std::vector<int>(static_cast<size_t>(rows)),
                 std::vector<float>(static_cast<size_t>(rows))};
  in_.out = Tensor(in_.h.shape());
  expert_rows_.assign(static_cast<size_t>(local), {});
  expert_pos_.assign(static_cast<size_t>(rows), 0);
  for (int r = 0; r < rows; ++r) {
    std::vector<int>& mine =
        expert_rows_[static_cast<size_t>(in_.local_expert[static_cast<size_t>(r)])];
    expert_pos_[static_cast<size_t>(r)] = static_cast<int>(mine.size());
    mine.push_back(r);
  }
  caches_.assign(static_cast<size_t>(local), ExpertCache{});
  recomputed_ = false;
  bwd_chunk_ = canonical_chunks(layout_, chunks_bwd_);
}

// NetMoE Alg. 1 line 10 for chunk i, with h (not LN2(h)) sent: the residual is inlined.
SampleMovingMoe::Rows SampleMovingMoe::scatter_send(int i) const {
  const std::vector<int> index = send_chunk_rows(layout_, i, chunks_fwd_);
  const bool known = !layout_.recv_counts.empty();
  return {with_ints(gather_rows(send_, index), gather_ints(meta_, kMeta, index), kMeta),
          chunk_member_rows(layout_, i, chunks_fwd_, false),
          known ? chunk_member_rows(layout_, i, chunks_fwd_, true) : std::vector<int>{}, kMeta};
}

void SampleMovingMoe::scatter_received(int i, const Tensor& rows) {
  got_rows_.at(static_cast<size_t>(i)) = split_ints(rows, kMeta, got_meta_[static_cast<size_t>(i)]);
}

void SampleMovingMoe::expert_chunk(int i) {
  const auto k = static_cast<size_t>(i);
  rows_.at(k) = recv_chunk_canonical(layout_, i, chunks_fwd_);
  z_[k] = run_expert_chunk(rows_[k], got_rows_[k], got_meta_[k]);
  got_rows_[k] = {};
}

// E(LN2(h)) for the canonical `rows` (residual rows h), their activations kept in the full
// caches at the experts' rows or dropped (recompute_experts).
Tensor SampleMovingMoe::experts_forward(const std::vector<int>& rows, const Tensor& h, bool keep) {
  LayerNorm ln = copy_of(ln2_);
  const Tensor a = ln.forward(h);
  Tensor out(h.shape());
  for (int l = 0; l < moe_.local_experts(); ++l) {
    std::vector<int> sel, pos;  // the chunk's rows of expert l and their rows in its caches
    for (size_t k = 0; k < rows.size(); ++k)
      if (in_.local_expert[static_cast<size_t>(rows[k])] == l) {
        sel.push_back(static_cast<int>(k));
        pos.push_back(expert_pos_[static_cast<size_t>(rows[k])]);
      }
    if (sel.empty()) continue;
    ExpertCache part;
    scatter_rows(out, moe_.expert(l).forward(gather_rows(a, sel), part), sel);
    if (!keep) continue;
    ExpertCache& full = caches_[static_cast<size_t>(l)];
    const auto total = static_cast<int64_t>(expert_rows_[static_cast<size_t>(l)].size());
    if (full.saved.empty())
      for (const Tensor& t : part.saved)
        full.saved.emplace_back(std::vector<int64_t>{total, t.cols()});
    for (size_t s = 0; s < part.saved.size(); ++s) scatter_rows(full.saved[s], part.saved[s], pos);
  }
  return out;
}

// z = w * E(LN2(h)) + [first slot] h for the chunk's rows (canonical `rows`): NetMoE Alg. 1
// line 12 (Appendix A). Activations go into the full caches at the experts' rows.
Tensor SampleMovingMoe::run_expert_chunk(const std::vector<int>& rows, const Tensor& h,
                                         const std::vector<int>& meta) {
  for (size_t k = 0; k < rows.size(); ++k) {
    const auto r = static_cast<size_t>(rows[k]);
    in_.h.set_rows(rows[k], h.slice_rows(static_cast<int64_t>(k), 1));
    in_.token[r] = meta[k * kMeta];
    in_.first[r] = meta[k * kMeta + 1];
    in_.weight[r] = std::bit_cast<float>(meta[k * kMeta + 2]);
  }
  const Tensor out = experts_forward(rows, h, !moe_.recompute_experts());
  scatter_rows(in_.out, out, rows);
  Tensor z(h.shape());
  for (int64_t k = 0; k < z.rows(); ++k) {
    const auto r = static_cast<size_t>(rows[static_cast<size_t>(k)]);
    const float w = in_.weight[r];
    const bool first = in_.first[r] != 0;
    for (int64_t c = 0; c < z.cols(); ++c)
      z.at(k, c) = w * out.at(k, c) + (first ? h.at(k, c) : 0.0f);
  }
  return z;
}

// NetMoE Alg. 1 line 13: the placement, the new samples of this member and their slots.
void SampleMovingMoe::set_placement(const std::vector<int>& place) {
  if (place.size() != samples_.size() * static_cast<size_t>(ranks_))
    throw Error("sample moving moe", "the placement has " + std::to_string(place.size()) +
                                         " samples, the group " +
                                         std::to_string(samples_.size() * size_t(ranks_)));
  place_ = place;
  slot_.assign(place_.size(), 0);
  std::vector<int> filled(static_cast<size_t>(ranks_), 0);
  moved_.clear();
  for (size_t i = 0; i < place_.size(); ++i) {  // new samples sit in ascending global id
    const int d = place_[i];
    if (d < 0 || d >= ranks_) throw Error("sample moving moe", "placement names a bad rank");
    slot_[i] = filled[static_cast<size_t>(d)]++;
    if (d == rank_) moved_.push_back(static_cast<int>(i));
  }
  if (static_cast<int>(moved_.size()) * seq_len_ != tokens_)
    throw Error("sample moving moe", "the placement does not keep " +
                                         std::to_string(tokens_ / seq_len_) + " samples per rank");
  sent_row_.clear();
  sent_dest_.clear();
  got_ = Gathered{};
}

// NetMoE Alg. 1 line 14 for one chunk: every row goes straight to its sample's new rank,
// tagged with its backward chunk.
SampleMovingMoe::Rows SampleMovingMoe::gather_send(int i) {
  if (place_.empty()) throw Error("sample moving moe", "the gather needs the placement first");
  const std::vector<int>& rows = rows_.at(static_cast<size_t>(i));
  const int nb = chunks_bwd_;
  std::vector<std::vector<int>> by(static_cast<size_t>(ranks_)), dest(static_cast<size_t>(ranks_));
  for (size_t k = 0; k < rows.size(); ++k) {
    const int g = in_.token[static_cast<size_t>(rows[k])], sample = g / seq_len_;
    const auto d = static_cast<size_t>(place_.at(static_cast<size_t>(sample)));
    by[d].push_back(static_cast<int>(k));
    dest[d].push_back((slot_[static_cast<size_t>(sample)] * seq_len_ + g % seq_len_) * nb +
                      bwd_chunk_[static_cast<size_t>(rows[k])]);
  }
  std::vector<int> order, flat, send;
  for (int d = 0; d < ranks_; ++d) {
    for (int k : by[static_cast<size_t>(d)]) {
      sent_row_.push_back(rows[static_cast<size_t>(k)]);
      sent_dest_.push_back(d);
    }
    send.push_back(static_cast<int>(by[static_cast<size_t>(d)].size()));
    order.insert(order.end(), by[static_cast<size_t>(d)].begin(), by[static_cast<size_t>(d)].end());
    flat.insert(flat.end(), dest[static_cast<size_t>(d)].begin(),
                dest[static_cast<size_t>(d)].end());
  }
  Rows out{with_ints(gather_rows(z_[static_cast<size_t>(i)], order), flat, kGatherMeta),
           send,
           {},
           kGatherMeta};
  z_[static_cast<size_t>(i)] = {};
  return out;
}

// The new rank sums the arriving rows (recv[src] from each member) into y.
void SampleMovingMoe::gather_received(const Tensor& rows, const std::vector<int>& recv) {
  const int nb = chunks_bwd_;
  std::vector<int> where;  // per arriving row: its token's row and chunk tag
  const Tensor got = split_ints(rows, kGatherMeta, where);
  size_t i = 0;
  for (int src = 0; src < ranks_; ++src)
    for (int c = 0; c < recv.at(static_cast<size_t>(src)); ++c, ++i) {
      float* out = y_.row(where[i] / nb);
      const float* row = got.row(static_cast<int64_t>(i));
      for (int64_t col = 0; col < y_.cols(); ++col) out[col] += row[col];
      got_.src.push_back(src);
      got_.dest.push_back(where[i] / nb);
      got_.tag.push_back(where[i] % nb);
    }
  if (i != static_cast<size_t>(got.rows()))
    throw Error("sample moving moe", "the gather's counts do not match its rows");
}

Tensor SampleMovingMoe::forward_end(std::vector<int>& samples) {
  if (place_.empty()) throw Error("sample moving moe", "the forward needs the placement");
  samples = moved_;
  has_forward_ = true;
  return std::move(y_);
}

void SampleMovingMoe::backward_begin(const Tensor& dy) {
  if (!has_forward_) throw Error("sample moving moe", "backward needs a forward first");
  dy_ = dy;
  dsend_ = Tensor({plan_.rows(), dy.cols()});
  dw_send_.assign(static_cast<size_t>(plan_.rows()), 0.0f);
  routes_ = dy_routes();
  dz_.assign(static_cast<size_t>(chunks_bwd_), {});
  dh_.assign(static_cast<size_t>(chunks_bwd_), {});
  dw_.assign(static_cast<size_t>(chunks_bwd_), {});
}

// The gather's backward, per backward chunk j: the new ranks send dy of the rows tagged j
// (source-major, in the order they got them); they arrive, new-rank-major, in the order the
// expert side sent them, which places them among the canonical rows of chunk j.
SampleMovingMoe::Rows SampleMovingMoe::dy_send(int j) const {
  const DyRoute& route = routes_.at(static_cast<size_t>(j));
  return {gather_rows(dy_, route.dy_rows), route.send, route.recv, 0};
}

void SampleMovingMoe::dy_received(int j, const Tensor& rows) {
  const DyRoute& route = routes_.at(static_cast<size_t>(j));
  Tensor dz({static_cast<int64_t>(route.rows.size()), rows.cols()});
  scatter_rows(dz, rows, route.arrival);
  dz_[static_cast<size_t>(j)] = std::move(dz);
}

void SampleMovingMoe::backward_expert(int j) {
  const auto k = static_cast<size_t>(j);
  dh_[k] = backward_expert_chunk(routes_.at(k).rows, dz_[k], dw_[k]);
  dz_[k] = {};
}

// The scatter's backward: dh rows and dw (one trailing column) back to the token side.
SampleMovingMoe::Rows SampleMovingMoe::dh_send(int j) {
  const auto k = static_cast<size_t>(j);
  std::vector<int> bits;
  for (float w : dw_.at(k)) bits.push_back(std::bit_cast<int>(w));
  Rows out{with_ints(dh_[k], bits, kScatterBackwardMeta),
           chunk_member_rows(layout_, j, chunks_bwd_, true),
           chunk_member_rows(layout_, j, chunks_bwd_, false), kScatterBackwardMeta};
  dh_[k] = {};
  return out;
}

void SampleMovingMoe::dh_received(int j, const Tensor& rows) {
  std::vector<int> back;
  const Tensor got = split_ints(rows, kScatterBackwardMeta, back);
  const std::vector<int> index = send_chunk_rows(layout_, j, chunks_bwd_);
  scatter_rows(dsend_, got, index);
  for (size_t r = 0; r < index.size(); ++r)
    dw_send_[static_cast<size_t>(index[r])] = std::bit_cast<float>(back[r]);
}

Tensor SampleMovingMoe::backward_end(float aux_grad) {
  std::vector<float> grad_weight(static_cast<size_t>(routing_.slots()), 0.0f);
  for (int r = 0; r < plan_.rows(); ++r)
    grad_weight[static_cast<size_t>(plan_.row_slot[static_cast<size_t>(r)])] =
        dw_send_[static_cast<size_t>(r)];
  Tensor out = order_rows_backward(plan_, dsend_);
  moe_.gate().regroup_aux(aux_home_, aux_stats_);  // d aux of each token's home
  out.add(ln2_.backward(moe_.gate().backward(grad_weight, aux_grad)));
  dy_ = dsend_ = {};
  return out;
}

// The gather's backward, per backward chunk j: the new ranks send dy of the rows tagged j
// (source-major, in the order they got them); they arrive, new-rank-major, in the order the
// expert side sent them, which places them among the canonical rows of chunk j.
std::vector<SampleMovingMoe::DyRoute> SampleMovingMoe::dy_routes() const {
  const int ranks = ranks_, n = chunks_bwd_;
  std::vector<DyRoute> routes(static_cast<size_t>(n));
  std::vector<std::vector<int>> send(static_cast<size_t>(n * ranks)), sent(send.size());
  for (size_t i = 0; i < got_.src.size(); ++i)  // token side: rows of y per (chunk, source)
    send[static_cast<size_t>(got_.tag[i] * ranks + got_.src[i])].push_back(got_.dest[i]);
  for (size_t i = 0; i < sent_row_.size(); ++i) {  // expert side: rows per (chunk, new rank)
    const int r = sent_row_[i];
    sent[static_cast<size_t>(bwd_chunk_[static_cast<size_t>(r)] * ranks + sent_dest_[i])].push_back(
        r);
  }
  std::vector<int> pos(static_cast<size_t>(layout_.recv_rows()), -1);  // row within its chunk
  for (int j = 0; j < n; ++j) {
    DyRoute& route = routes[static_cast<size_t>(j)];
    route.rows = recv_chunk_canonical(layout_, j, n);
    for (size_t k = 0; k < route.rows.size(); ++k)
      pos[static_cast<size_t>(route.rows[k])] = static_cast<int>(k);
    for (int q = 0; q < ranks; ++q) {
      const std::vector<int>& mine = send[static_cast<size_t>(j * ranks + q)];
      route.dy_rows.insert(route.dy_rows.end(), mine.begin(), mine.end());
      route.send.push_back(static_cast<int>(mine.size()));
      const std::vector<int>& back = sent[static_cast<size_t>(j * ranks + q)];
      route.recv.push_back(static_cast<int>(back.size()));
      for (int r : back) route.arrival.push_back(pos[static_cast<size_t>(r)]);
    }
  }
  return routes;
}

// Expert side of the backward for the canonical `rows`: dz -> dw (per row), and
// dh = [first] dz + LN2'(E'(w dz)).
Tensor SampleMovingMoe::backward_expert_chunk(const std::vector<int>& rows, const Tensor& dz,
                                              std::vector<float>& dw) {
  const int64_t n = dz.rows(), cols = dz.cols();
  Tensor dout(dz.shape()), dh(dz.shape());
  dw.assign(static_cast<size_t>(n), 0.0f);
  for (int64_t k = 0; k < n; ++k) {
    const auto r = static_cast<size_t>(rows[static_cast<size_t>(k)]);
    const float w = in_.weight[r];
    const bool first = in_.first[r] != 0;
    double dot = 0;
    for (int64_t c = 0; c < cols; ++c) {
      dout.at(k, c) = w * dz.at(k, c);
      dot += static_cast<double>(dz.at(k, c)) * in_.out.at(static_cast<int64_t>(r), c);
      if (first) dh.at(k, c) = dz.at(k, c);
    }
    dw[static_cast<size_t>(k)] = static_cast<float>(dot);
  }
  // recompute_experts: the layer's first backward chunk runs the forward's chunks again, on
  // the same rows (the same GEMM shapes, so the same bits), and keeps them for the rest.
  if (moe_.recompute_experts() && !recomputed_) {
    for (const std::vector<int>& fwd : rows_) experts_forward(fwd, gather_rows(in_.h, fwd), true);
    recomputed_ = true;
  }
  Tensor da(dz.shape());
  for (int l = 0; l < moe_.local_experts(); ++l) {
    std::vector<int> sel, pos;
    for (size_t k = 0; k < rows.size(); ++k)
      if (in_.local_expert[static_cast<size_t>(rows[k])] == l) {
        sel.push_back(static_cast<int>(k));
        pos.push_back(expert_pos_[static_cast<size_t>(rows[k])]);
      }
    if (sel.empty()) continue;
    ExpertCache part;
    for (const Tensor& t : caches_[static_cast<size_t>(l)].saved)
      part.saved.push_back(gather_rows(t, pos));
    scatter_rows(da, moe_.expert(l).backward(gather_rows(dout, sel), part), sel);
  }
  LayerNorm ln = copy_of(ln2_);  // LN2 again on the chunk's rows, for its backward
  ln.forward(gather_rows(in_.h, rows));
  dh.add(ln.backward(da));
  std::vector<Param> mine = ln.params(), shared = ln2_.params();
  for (size_t i = 0; i < mine.size(); ++i) shared[i].grad->add(*mine[i].grad);
  return dh;
}

}  // namespace moecomm::nn
