#include "nn/sample_moving_moe.h"

#include <array>
#include <bit>
#include <string>

#include "core/error.h"
#include "nn/dropless_order.h"
#include "nn/exchange_chunks.h"

namespace moecomm::nn {
namespace {

constexpr int kMeta = 4;  // scatter metadata per row: expert, global token, first, weight bits

// Expert of each row of an expert-major plan.
std::vector<int> row_experts(const OrderPlan& plan) {
  std::vector<int> out(static_cast<size_t>(plan.rows()));
  for (int e = 0; e < plan.experts; ++e)
    for (int r = plan.offsets[static_cast<size_t>(e)]; r < plan.offsets[static_cast<size_t>(e) + 1];
         ++r)
      out[static_cast<size_t>(r)] = e;
  return out;
}

void put(double v, std::vector<int>& out) {
  for (int x : std::bit_cast<std::array<int, 2>>(v)) out.push_back(x);
}

double take(const std::vector<int>& in, size_t& at) {
  const std::array<int, 2> x{in.at(at), in.at(at + 1)};
  at += 2;
  return std::bit_cast<double>(x);
}

std::vector<int> times(const std::vector<int>& v, int k) {
  std::vector<int> out(v);
  for (int& x : out) x *= k;
  return out;
}

}  // namespace

SampleMovingMoe::SampleMovingMoe(MoeLayer& moe, LayerNorm& ln2, int layer, bool dropless,
                                 SampleExchange& exchange)
    : moe_(moe),
      ln2_(ln2),
      expert_ln_(static_cast<int>(ln2.params().front().value->size())),
      layer_(layer),
      exchange_(exchange) {
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
  const std::vector<int> expert = row_experts(plan_);
  for (int r = 0; r < plan_.rows(); ++r)
    ++counts[static_cast<size_t>(plan_.row_token[static_cast<size_t>(r)] / seq_len * experts +
                                 expert[static_cast<size_t>(r)])];
  exchange_.submit_placement(layer_, samples, counts);  // Alg. 1 line 9: solve in background
  scatter(h, seq_len, samples);                         // line 10
  const Tensor z = run_experts();                       // lines 11-12
  has_forward_ = true;
  return gather(z, seq_len, tokens, samples);  // lines 13-14
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

// NetMoE Alg. 1 line 10, with h (not LN2(h)) sent: the residual is inlined on the expert side.
void SampleMovingMoe::scatter(const Tensor& h, int seq_len, const std::vector<int>& samples) {
  const int ranks = exchange_.ranks(), local = moe_.local_experts();
  send_rows_.assign(static_cast<size_t>(ranks), 0);
  for (int e = 0; e < plan_.experts; ++e)
    send_rows_[static_cast<size_t>(e / local)] += plan_.counts[static_cast<size_t>(e)];
  const std::vector<int> expert = row_experts(plan_);
  std::vector<char> seen(static_cast<size_t>(plan_.tokens), 0);
  std::vector<int> meta;
  meta.reserve(static_cast<size_t>(plan_.rows() * kMeta));
  for (int r = 0; r < plan_.rows(); ++r) {
    const int t = plan_.row_token[static_cast<size_t>(r)];
    meta.push_back(expert[static_cast<size_t>(r)]);
    meta.push_back(samples[static_cast<size_t>(t / seq_len)] * seq_len + t % seq_len);
    meta.push_back(seen[static_cast<size_t>(t)] ? 0 : 1);
    meta.push_back(std::bit_cast<int>(plan_.row_weight[static_cast<size_t>(r)]));
    seen[static_cast<size_t>(t)] = 1;
  }
  in_ = Received{};
  in_.h = exchange_.rows(order_rows(plan_, h), send_rows_, in_.recv_rows, "netmoe.scatter");
  const std::vector<int> got =
      exchange_.ints(meta, times(send_rows_, kMeta), "netmoe.scatter.meta");
  const size_t n = got.size() / kMeta;
  for (size_t r = 0; r < n; ++r) {
    in_.local_expert.push_back(got[r * kMeta] - moe_.first_expert());
    in_.token.push_back(got[r * kMeta + 1]);
    in_.first.push_back(got[r * kMeta + 2]);
    in_.weight.push_back(std::bit_cast<float>(got[r * kMeta + 3]));
  }
}

// z = w * E(LN2(h)) + [first slot] h: NetMoE Alg. 1 line 12 (Appendix A).
Tensor SampleMovingMoe::run_experts() {
  std::vector<Param> mine = expert_ln_.params(), shared = ln2_.params();
  for (size_t i = 0; i < mine.size(); ++i) *mine[i].value = *shared[i].value;
  const Tensor a = expert_ln_.forward(in_.h);
  const int local = moe_.local_experts();
  expert_rows_.assign(static_cast<size_t>(local), {});
  for (size_t r = 0; r < in_.token.size(); ++r)
    expert_rows_.at(static_cast<size_t>(in_.local_expert[r])).push_back(static_cast<int>(r));
  out_ = Tensor(in_.h.shape());
  caches_.assign(static_cast<size_t>(local), ExpertCache{});
  for (int l = 0; l < local; ++l) {
    const std::vector<int>& rows = expert_rows_[static_cast<size_t>(l)];
    if (rows.empty()) continue;
    scatter_rows(
        out_, moe_.expert(l).forward(gather_rows(a, rows), caches_[static_cast<size_t>(l)]), rows);
  }
  Tensor z(out_.shape());
  const int64_t cols = z.cols();
  for (int64_t r = 0; r < z.rows(); ++r) {
    const float w = in_.weight[static_cast<size_t>(r)];
    const bool first = in_.first[static_cast<size_t>(r)] != 0;
    for (int64_t c = 0; c < cols; ++c)
      z.at(r, c) = w * out_.at(r, c) + (first ? in_.h.at(r, c) : 0.0f);
  }
  return z;
}

// NetMoE Alg. 1 lines 13-14: every row goes straight to its sample's new rank.
Tensor SampleMovingMoe::gather(const Tensor& z, int seq_len, int tokens,
                               std::vector<int>& samples) {
  const std::vector<int> place = exchange_.collect_placement(layer_);
  const int ranks = exchange_.ranks(), me = exchange_.rank();
  std::vector<int> slot(place.size()), filled(static_cast<size_t>(ranks), 0), mine;
  for (size_t i = 0; i < place.size(); ++i) {  // new samples sit in ascending global id
    const int d = place[i];
    if (d < 0 || d >= ranks) throw Error("sample moving moe", "placement names a bad rank");
    slot[i] = filled[static_cast<size_t>(d)]++;
    if (d == me) mine.push_back(static_cast<int>(i));
  }
  if (static_cast<int>(mine.size()) * seq_len != tokens)
    throw Error("sample moving moe", "the placement does not keep " +
                                         std::to_string(tokens / seq_len) + " samples per rank");
  gather_send_.assign(static_cast<size_t>(ranks), 0);
  std::vector<std::vector<int>> by_rank(static_cast<size_t>(ranks));
  std::vector<std::vector<int>> dest_by_rank(static_cast<size_t>(ranks));
  for (size_t r = 0; r < in_.token.size(); ++r) {
    const int g = in_.token[r], sample = g / seq_len, d = place.at(static_cast<size_t>(sample));
    by_rank[static_cast<size_t>(d)].push_back(static_cast<int>(r));
    dest_by_rank[static_cast<size_t>(d)].push_back(slot[static_cast<size_t>(sample)] * seq_len +
                                                   g % seq_len);
  }
  gather_order_.clear();
  std::vector<int> dest;
  for (int d = 0; d < ranks; ++d) {
    gather_send_[static_cast<size_t>(d)] = static_cast<int>(by_rank[static_cast<size_t>(d)].size());
    gather_order_.insert(gather_order_.end(), by_rank[static_cast<size_t>(d)].begin(),
                         by_rank[static_cast<size_t>(d)].end());
    dest.insert(dest.end(), dest_by_rank[static_cast<size_t>(d)].begin(),
                dest_by_rank[static_cast<size_t>(d)].end());
  }
  const Tensor got =
      exchange_.rows(gather_rows(z, gather_order_), gather_send_, gather_recv_, "netmoe.gather");
  gather_token_ = exchange_.ints(dest, gather_send_, "netmoe.gather.meta");
  Tensor y({tokens, z.cols()});
  for (size_t i = 0; i < gather_token_.size(); ++i) {
    float* out = y.row(gather_token_[i]);
    const float* row = got.row(static_cast<int64_t>(i));
    for (int64_t c = 0; c < y.cols(); ++c) out[c] += row[c];
  }
  samples = std::move(mine);
  return y;
}

Tensor SampleMovingMoe::backward(const Tensor& dy, float aux_grad) {
  if (!has_forward_) throw Error("sample moving moe", "backward needs a forward first");
  std::vector<int> counts;  // the gather's backward: dy rows back to the expert side
  const Tensor back = exchange_.rows(gather_rows(dy, gather_token_), gather_recv_, counts,
                                     "netmoe.gather.backward");
  Tensor dz(out_.shape());
  scatter_rows(dz, back, gather_order_);
  std::vector<float> dw;
  const Tensor dh_rows = backward_experts(dz, dw);
  std::vector<int> dw_bits;  // the scatter's backward: dh rows and dw to the token side
  for (float w : dw) dw_bits.push_back(std::bit_cast<int>(w));
  const Tensor dsend = exchange_.rows(dh_rows, in_.recv_rows, counts, "netmoe.scatter.backward");
  const std::vector<int> dw_back =
      exchange_.ints(dw_bits, in_.recv_rows, "netmoe.scatter.backward.meta");
  std::vector<float> grad_weight(static_cast<size_t>(routing_.slots()), 0.0f);
  for (int r = 0; r < plan_.rows(); ++r)
    grad_weight[static_cast<size_t>(plan_.row_slot[static_cast<size_t>(r)])] =
        std::bit_cast<float>(dw_back[static_cast<size_t>(r)]);
  Tensor dh = order_rows_backward(plan_, dsend);
  moe_.gate().regroup_aux(aux_home_, aux_stats_);  // d aux of each token's home
  dh.add(ln2_.backward(moe_.gate().backward(grad_weight, aux_grad)));
  return dh;
}

// Expert side of the backward: dz -> dw (per row), and dh = [first] dz + LN2'(E'(w dz)).
Tensor SampleMovingMoe::backward_experts(const Tensor& dz, std::vector<float>& dw) {
  const int64_t n = dz.rows(), cols = dz.cols();
  Tensor dout(dz.shape()), dh(dz.shape());
  dw.assign(static_cast<size_t>(n), 0.0f);
  for (int64_t r = 0; r < n; ++r) {
    const float w = in_.weight[static_cast<size_t>(r)];
    const bool first = in_.first[static_cast<size_t>(r)] != 0;
    double dot = 0;
    for (int64_t c = 0; c < cols; ++c) {
      dout.at(r, c) = w * dz.at(r, c);
      dot += static_cast<double>(dz.at(r, c)) * out_.at(r, c);
      if (first) dh.at(r, c) = dz.at(r, c);
    }
    dw[static_cast<size_t>(r)] = static_cast<float>(dot);
  }
  Tensor da(dz.shape());
  for (int l = 0; l < moe_.local_experts(); ++l) {
    const std::vector<int>& rows = expert_rows_[static_cast<size_t>(l)];
    if (rows.empty()) continue;
    scatter_rows(da,
                 moe_.expert(l).backward(gather_rows(dout, rows), caches_[static_cast<size_t>(l)]),
                 rows);
  }
  std::vector<Param> mine = expert_ln_.params(), shared = ln2_.params();
  for (Param& p : mine) p.grad->fill(0.0f);
  dh.add(expert_ln_.backward(da));
  for (size_t i = 0; i < mine.size(); ++i) shared[i].grad->add(*mine[i].grad);
  return dh;
}

}  // namespace moecomm::nn
