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

constexpr int kMeta = 3;  // scatter metadata per row: global token, first, weight bits

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

SampleMovingMoe::SampleMovingMoe(MoeLayer& moe, LayerNorm& ln2, int layer, bool dropless,
                                 SampleExchange& exchange)
    : moe_(moe), ln2_(ln2), layer_(layer), exchange_(exchange) {
  // Each token's residual rides on its first slot: only exact when no slot is dropped.
  if (!dropless)
    throw Error("placement=netmoe",
                "expert residual inlining needs the dropless layout (capacity_factor 0)");
  if (exchange.ranks() * moe.local_experts() != moe.num_experts())
    throw Error("placement=netmoe", "the sample exchange's EP size does not match the layer's");
}

Tensor SampleMovingMoe::forward(const Tensor& h, int seq_len, std::vector<int>& samples) {
  const int tokens = static_cast<int>(h.rows());
  if (seq_len <= 0 || tokens != static_cast<int>(samples.size()) * seq_len)
    throw Error("sample moving moe", std::to_string(tokens) + " rows for " +
                                         std::to_string(samples.size()) + " samples of " +
                                         std::to_string(seq_len) + " tokens");
  routing_ = moe_.gate().forward(ln2_.forward(h));  // the gate needs LN2(h) here
  if (routing_.expert_choice)
    throw Error("placement=netmoe", "needs a token-choice gate (expert choice drops tokens)");
  home_aux(seq_len, samples);
  plan_ = DroplessOrder().plan(routing_);
  const int experts = moe_.num_experts();
  std::vector<int> counts(samples.size() * static_cast<size_t>(experts), 0);  // NetMoE Eq. 2
  std::vector<int> meta;  // per send row (expert-major): global token, first slot, weight
  std::vector<char> seen(static_cast<size_t>(tokens), 0);
  for (int e = 0; e < experts; ++e)
    for (int r = plan_.offsets[static_cast<size_t>(e)];
         r < plan_.offsets[static_cast<size_t>(e) + 1]; ++r) {
      const int t = plan_.row_token[static_cast<size_t>(r)];
      ++counts[static_cast<size_t>(t / seq_len * experts + e)];
      meta.push_back(samples[static_cast<size_t>(t / seq_len)] * seq_len + t % seq_len);
      meta.push_back(seen[static_cast<size_t>(t)] ? 0 : 1);
      meta.push_back(std::bit_cast<int>(plan_.row_weight[static_cast<size_t>(r)]));
      seen[static_cast<size_t>(t)] = 1;
    }
  exchange_.submit_placement(layer_, samples, counts);  // Alg. 1 line 9: solve in background
  exchange_layout();
  const Tensor send = order_rows(plan_, h);
  const int n = exchange_.chunks(false);
  chunks_bwd_ = exchange_.chunks(true);
  bwd_chunk_ = canonical_chunks(layout_, chunks_bwd_);
  std::vector<Tensor> got(static_cast<size_t>(n)), z(static_cast<size_t>(n));
  std::vector<std::vector<int>> got_meta(static_cast<size_t>(n)), rows(static_cast<size_t>(n));
  Tensor y({tokens, h.cols()});
  std::vector<int> moved;
  exchange_.pipeline(
      n, [&](int i) { scatter_chunk(i, n, send, meta, got, got_meta); },  // line 10
      [&](int i) {                                                        // lines 11-12
        const auto k = static_cast<size_t>(i);
        rows[k] = recv_chunk_canonical(layout_, i, n);
        z[k] = run_expert_chunk(rows[k], got[k], got_meta[k]);
        got[k] = {};
      },
      [&](int i) {  // lines 13-14
        if (i == 0) place_samples(seq_len, tokens, moved);
        gather_chunk(rows[static_cast<size_t>(i)], z[static_cast<size_t>(i)], seq_len, y);
        z[static_cast<size_t>(i)] = {};
      });
  samples = std::move(moved);
  has_forward_ = true;
  return y;
}

// The baseline's aux loss with samples moved: per home rank h, the sums of AuxStats over the
// tokens of h's samples, wherever they sit; each member adds those it holds and all-gathers
// them (P (1 + 2E) doubles), then every member sums the same values in member order.
void SampleMovingMoe::home_aux(int seq_len, const std::vector<int>& samples) {
  Gate& gate = moe_.gate();
  if (!gate.groups_aux())
    throw Error("placement=netmoe", "the gate's aux loss cannot be computed per home rank");
  const int ranks = exchange_.ranks(), experts = moe_.num_experts();
  const int batch = static_cast<int>(samples.size());
  aux_home_.assign(static_cast<size_t>(routing_.tokens), 0);
  for (int t = 0; t < routing_.tokens; ++t)
    aux_home_[static_cast<size_t>(t)] = samples[static_cast<size_t>(t / seq_len)] / batch;
  std::vector<AuxStats> mine(static_cast<size_t>(ranks), AuxStats(experts));
  gate.add_aux_stats(aux_home_, mine);
  std::vector<int> bits;
  for (const AuxStats& s : mine) {
    put(s.tokens, bits);
    for (int e = 0; e < experts; ++e) put(s.count[static_cast<size_t>(e)], bits);
    for (int e = 0; e < experts; ++e) put(s.value[static_cast<size_t>(e)], bits);
  }
  const std::vector<int> all = exchange_.all_gather(bits);
  aux_stats_.assign(static_cast<size_t>(ranks), AuxStats(experts));
  size_t at = 0;
  for (int m = 0; m < ranks; ++m)
    for (AuxStats& s : aux_stats_) {
      AuxStats part(experts);
      part.tokens = take(all, at);
      for (double& c : part.count) c = take(all, at);
      for (double& v : part.value) v = take(all, at);
      s.add(part);
    }
  routing_.aux_loss = gate.aux_of(aux_stats_[static_cast<size_t>(exchange_.rank())]);
}

// The scatter's counts (L ints per member) and the expert side's canonical rows.
void SampleMovingMoe::exchange_layout() {
  const int ranks = exchange_.ranks(), local = moe_.local_experts();
  layout_ = ExchangeLayout{ranks, local, plan_.counts, {}};
  const std::vector<int> per_member(static_cast<size_t>(ranks), local);  // L ints both ways
  layout_.recv_counts =
      exchange_.ints(plan_.counts, per_member, "netmoe.scatter.counts", per_member);
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
}

// NetMoE Alg. 1 line 10 for chunk i of n, with h (not LN2(h)) sent: the residual is inlined.
void SampleMovingMoe::scatter_chunk(int i, int n, const Tensor& send, const std::vector<int>& meta,
                                    std::vector<Tensor>& got,
                                    std::vector<std::vector<int>>& got_meta) {
  const std::vector<int> index = send_chunk_rows(layout_, i, n);
  const std::vector<int> members = chunk_member_rows(layout_, i, n, false);
  std::vector<int> recv_rows = chunk_member_rows(layout_, i, n, true);  // known: the layout's
  const Tensor joined =
      exchange_.rows(with_ints(gather_rows(send, index), gather_ints(meta, kMeta, index), kMeta),
                     members, recv_rows, "netmoe.scatter", kMeta);
  got[static_cast<size_t>(i)] = split_ints(joined, kMeta, got_meta[static_cast<size_t>(i)]);
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
    ExpertCache& full = caches_[static_cast<size_t>(l)];
    const auto total = static_cast<int64_t>(expert_rows_[static_cast<size_t>(l)].size());
    if (full.saved.empty())
      for (const Tensor& t : part.saved)
        full.saved.emplace_back(std::vector<int64_t>{total, t.cols()});
    for (size_t s = 0; s < part.saved.size(); ++s) scatter_rows(full.saved[s], part.saved[s], pos);
  }
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
void SampleMovingMoe::place_samples(int seq_len, int tokens, std::vector<int>& moved) {
  place_ = exchange_.collect_placement(layer_);
  const int ranks = exchange_.ranks(), me = exchange_.rank();
  slot_.assign(place_.size(), 0);
  std::vector<int> filled(static_cast<size_t>(ranks), 0);
  moved.clear();
  for (size_t i = 0; i < place_.size(); ++i) {  // new samples sit in ascending global id
    const int d = place_[i];
    if (d < 0 || d >= ranks) throw Error("sample moving moe", "placement names a bad rank");
    slot_[i] = filled[static_cast<size_t>(d)]++;
    if (d == me) moved.push_back(static_cast<int>(i));
  }
  if (static_cast<int>(moved.size()) * seq_len != tokens)
    throw Error("sample moving moe", "the placement does not keep " +
                                         std::to_string(tokens / seq_len) + " samples per rank");
  sent_row_.clear();
  sent_dest_.clear();
  got_ = Gathered{};
}

// NetMoE Alg. 1 line 14 for one chunk: every row goes straight to its sample's new rank,
// tagged with its backward chunk; the new rank sums the rows into y.
void SampleMovingMoe::gather_chunk(const std::vector<int>& rows, const Tensor& z, int seq_len,
                                   Tensor& y) {
  const int ranks = exchange_.ranks(), nb = chunks_bwd_;
  std::vector<std::vector<int>> by(static_cast<size_t>(ranks)), dest(static_cast<size_t>(ranks));
  for (size_t k = 0; k < rows.size(); ++k) {
    const int g = in_.token[static_cast<size_t>(rows[k])], sample = g / seq_len;
    const auto d = static_cast<size_t>(place_.at(static_cast<size_t>(sample)));
    by[d].push_back(static_cast<int>(k));
    dest[d].push_back((slot_[static_cast<size_t>(sample)] * seq_len + g % seq_len) * nb +
                      bwd_chunk_[static_cast<size_t>(rows[k])]);
  }
  std::vector<int> order, flat, send;
  for (int d = 0; d < ranks; ++d) {
    for (int k : by[static_cast<size_t>(d)]) {
      sent_row_.push_back(rows[static_cast<size_t>(k)]);
      sent_dest_.push_back(d);
    }
    send.push_back(static_cast<int>(by[static_cast<size_t>(d)].size()));
    order.insert(order.end(), by[static_cast<size_t>(d)].begin(), by[static_cast<size_t>(d)].end());
    flat.insert(flat.end(), dest[static_cast<size_t>(d)].begin(),
                dest[static_cast<size_t>(d)].end());
  }
  std::vector<int> recv;
  std::vector<int> where;  // per arriving row: its token's row and chunk tag
  const Tensor got = split_ints(
      exchange_.rows(with_ints(gather_rows(z, order), flat, 1), send, recv, "netmoe.gather", 1), 1,
      where);
  size_t i = 0;
  for (int src = 0; src < ranks; ++src)
    for (int c = 0; c < recv[static_cast<size_t>(src)]; ++c, ++i) {
      float* out = y.row(where[i] / nb);
      const float* row = got.row(static_cast<int64_t>(i));
      for (int64_t col = 0; col < y.cols(); ++col) out[col] += row[col];
      got_.src.push_back(src);
      got_.dest.push_back(where[i] / nb);
      got_.tag.push_back(where[i] % nb);
    }
}

Tensor SampleMovingMoe::backward(const Tensor& dy, float aux_grad) {
  if (!has_forward_) throw Error("sample moving moe", "backward needs a forward first");
  const int n = chunks_bwd_;
  Tensor dsend({plan_.rows(), dy.cols()});
  std::vector<float> dw_send(static_cast<size_t>(plan_.rows()), 0.0f);
  std::vector<Tensor> dz(static_cast<size_t>(n)), dh(static_cast<size_t>(n));
  std::vector<std::vector<float>> dw(static_cast<size_t>(n));
  const std::vector<DyRoute> routes = dy_routes();
  exchange_.pipeline(
      n, [&](int j) { dz[static_cast<size_t>(j)] = dy_chunk(routes[static_cast<size_t>(j)], dy); },
      [&](int j) {
        const auto k = static_cast<size_t>(j);
        dh[k] = backward_expert_chunk(routes[k].rows, dz[k], dw[k]);
        dz[k] = {};
      },
      [&](int j) {  // the scatter's backward: dh rows and dw back to the token side
        const auto k = static_cast<size_t>(j);
        const std::vector<int> members = chunk_member_rows(layout_, j, n, true);
        std::vector<int> counts = chunk_member_rows(layout_, j, n, false), bits, back;
        for (float w : dw[k]) bits.push_back(std::bit_cast<int>(w));
        const Tensor got = split_ints(exchange_.rows(with_ints(dh[k], bits, 1), members, counts,
                                                     "netmoe.scatter.backward", 1),
                                      1, back);
        const std::vector<int> index = send_chunk_rows(layout_, j, n);
        scatter_rows(dsend, got, index);
        for (size_t r = 0; r < index.size(); ++r)
          dw_send[static_cast<size_t>(index[r])] = std::bit_cast<float>(back[r]);
        dh[k] = {};
      });
  std::vector<float> grad_weight(static_cast<size_t>(routing_.slots()), 0.0f);
  for (int r = 0; r < plan_.rows(); ++r)
    grad_weight[static_cast<size_t>(plan_.row_slot[static_cast<size_t>(r)])] =
        dw_send[static_cast<size_t>(r)];
  Tensor out = order_rows_backward(plan_, dsend);
  moe_.gate().regroup_aux(aux_home_, aux_stats_);  // d aux of each token's home
  out.add(ln2_.backward(moe_.gate().backward(grad_weight, aux_grad)));
  return out;
}

// The gather's backward, per backward chunk j: the new ranks send dy of the rows tagged j
// (source-major, in the order they got them); they arrive, new-rank-major, in the order the
// expert side sent them, which places them among the canonical rows of chunk j.
std::vector<SampleMovingMoe::DyRoute> SampleMovingMoe::dy_routes() const {
  const int ranks = exchange_.ranks(), n = chunks_bwd_;
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

Tensor SampleMovingMoe::dy_chunk(const DyRoute& route, const Tensor& dy) {
  std::vector<int> recv = route.recv;
  const Tensor got =
      exchange_.rows(gather_rows(dy, route.dy_rows), route.send, recv, "netmoe.gather.backward", 0);
  Tensor dz({static_cast<int64_t>(route.rows.size()), dy.cols()});
  scatter_rows(dz, got, route.arrival);
  return dz;
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
