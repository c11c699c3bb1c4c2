#include "nn/gate_math.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "core/model_config.h"
#include "nn/gate.h"

namespace moecomm::nn {

Tensor softmax_rows(const Tensor& h) {
  Tensor p(h.shape());
  const int64_t n = h.cols();
  for (int64_t r = 0; r < h.rows(); ++r) {
    const float* in = h.row(r);
    float* out = p.row(r);
    const float mx = *std::max_element(in, in + n);
    double sum = 0;
    for (int64_t j = 0; j < n; ++j) sum += out[j] = std::exp(in[j] - mx);
    for (int64_t j = 0; j < n; ++j) out[j] = static_cast<float>(out[j] / sum);
  }
  return p;
}

Tensor softmax_rows_backward(const Tensor& p, const Tensor& dp) {
  Tensor dh(p.shape());
  const int64_t n = p.cols();
  for (int64_t r = 0; r < p.rows(); ++r) {
    double dot = 0;
    for (int64_t j = 0; j < n; ++j) dot += p.at(r, j) * dp.at(r, j);
    for (int64_t j = 0; j < n; ++j)
      dh.at(r, j) = p.at(r, j) * (dp.at(r, j) - static_cast<float>(dot));
  }
  return dh;
}

std::vector<int> topk_rows(const Tensor& s, int k) {
  const int n = static_cast<int>(s.cols());
  std::vector<int> out;
  out.reserve(static_cast<size_t>(s.rows() * k));
  std::vector<int> idx(static_cast<size_t>(n));
  for (int64_t r = 0; r < s.rows(); ++r) {
    std::iota(idx.begin(), idx.end(), 0);
    const float* v = s.row(r);
    std::partial_sort(idx.begin(), idx.begin() + k, idx.end(),
                      [v](int a, int b) { return v[a] > v[b] || (v[a] == v[b] && a < b); });
    out.insert(out.end(), idx.begin(), idx.begin() + k);
  }
  return out;
}

std::vector<int> group_limited_topk_rows(const Tensor& scores, const Tensor& affinity, int k,
                                         int groups, int group_top_k) {
  if (!core::limits_groups(groups, group_top_k)) return topk_rows(scores, k);
  const int n = static_cast<int>(scores.cols()), per_group = n / groups;
  std::vector<int> out;
  out.reserve(static_cast<size_t>(scores.rows() * k));
  std::vector<float> group_score(static_cast<size_t>(groups));
  std::vector<int> group_idx(static_cast<size_t>(groups)), idx;
  idx.reserve(static_cast<size_t>(group_top_k * per_group));
  for (int64_t r = 0; r < scores.rows(); ++r) {
    const float* a = affinity.row(r);
    for (int g = 0; g < groups; ++g) {
      const float* in = a + g * per_group;
      float first = in[0], second = -std::numeric_limits<float>::infinity();
      for (int j = 1; j < per_group; ++j) {
        if (in[j] > first) {
          second = first;
          first = in[j];
        } else if (in[j] > second) {
          second = in[j];
        }
      }
      group_score[static_cast<size_t>(g)] = per_group >= 2 ? first + second : first;
    }
    std::iota(group_idx.begin(), group_idx.end(), 0);
    std::partial_sort(group_idx.begin(), group_idx.begin() + group_top_k, group_idx.end(),
                      [&](int x, int y) {
                        const float sx = group_score[static_cast<size_t>(x)],
                                    sy = group_score[static_cast<size_t>(y)];
                        return sx > sy || (sx == sy && x < y);
                      });
    idx.clear();
    for (int i = 0; i < group_top_k; ++i)
      for (int j = 0; j < per_group; ++j)
        idx.push_back(group_idx[static_cast<size_t>(i)] * per_group + j);
    const float* v = scores.row(r);
    std::partial_sort(idx.begin(), idx.begin() + k, idx.end(),
                      [v](int x, int y) { return v[x] > v[y] || (v[x] == v[y] && x < y); });
    out.insert(out.end(), idx.begin(), idx.begin() + k);
  }
  return out;
}

namespace {

float chosen_sum(const Tensor& p, const std::vector<int>& choice, int k, int64_t t) {
  float z = 0;
  for (int j = 0; j < k; ++j) z += p.at(t, choice[static_cast<size_t>(t * k + j)]);
  return z;
}

}  // namespace

void fill_topk_slots(const Tensor& p, const std::vector<int>& choice, int k, bool normalize,
                     std::vector<int>& token, std::vector<int>& expert,
                     std::vector<float>& weight) {
  for (int64_t t = 0; t < p.rows(); ++t) {
    const float z = normalize ? chosen_sum(p, choice, k, t) : 1.0f;
    for (int j = 0; j < k; ++j) {
      const int e = choice[static_cast<size_t>(t * k + j)];
      token.push_back(static_cast<int>(t));
      expert.push_back(e);
      weight.push_back(p.at(t, e) / z);
    }
  }
}

void topk_slots_backward(const Tensor& p, const std::vector<int>& choice, int k, bool normalize,
                         const std::vector<float>& grad_weight, Tensor& dp) {
  for (int64_t t = 0; t < p.rows(); ++t) {
    const size_t s0 = static_cast<size_t>(t * k);
    if (!normalize) {
      for (int j = 0; j < k; ++j) dp.at(t, choice[s0 + j]) += grad_weight[s0 + j];
      continue;
    }
    // w_j = p_j / Z: dp_j = (g_j - sum_i g_i w_i) / Z.
    const float z = chosen_sum(p, choice, k, t);
    float gw = 0;
    for (int j = 0; j < k; ++j) gw += grad_weight[s0 + j] * p.at(t, choice[s0 + j]) / z;
    for (int j = 0; j < k; ++j) dp.at(t, choice[s0 + j]) += (grad_weight[s0 + j] - gw) / z;
  }
}

namespace {

std::vector<float> top1_fraction(const std::vector<int>& choice, int k, int64_t tokens,
                                 int64_t experts) {
  std::vector<float> f(static_cast<size_t>(experts), 0.0f);
  for (int64_t t = 0; t < tokens; ++t)
    f[static_cast<size_t>(choice[static_cast<size_t>(t * k)])] += 1.0f;
  for (float& x : f) x /= static_cast<float>(tokens);
  return f;
}

}  // namespace

float load_balance_loss(const Tensor& p, const std::vector<int>& choice, int k) {
  const int64_t T = p.rows(), E = p.cols();
  if (T == 0) return 0.0f;
  const std::vector<float> f = top1_fraction(choice, k, T, E);
  double aux = 0;
  for (int64_t e = 0; e < E; ++e) {
    double m = 0;
    for (int64_t t = 0; t < T; ++t) m += p.at(t, e);
    aux += f[static_cast<size_t>(e)] * m / static_cast<double>(T);
  }
  return static_cast<float>(static_cast<double>(E) * aux);
}

void load_balance_backward(const Tensor& p, const std::vector<int>& choice, int k, float grad_aux,
                           Tensor& dp) {
  const int64_t T = p.rows(), E = p.cols();
  if (T == 0 || grad_aux == 0.0f) return;
  const std::vector<float> f = top1_fraction(choice, k, T, E);
  const float scale = grad_aux * static_cast<float>(E) / static_cast<float>(T);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t e = 0; e < E; ++e) dp.at(t, e) += scale * f[static_cast<size_t>(e)];
}

void add_load_balance_stats(const Tensor& p, const std::vector<int>& choice, int k,
                            const std::vector<int>& group, std::vector<AuxStats>& stats) {
  for (int64_t t = 0; t < p.rows(); ++t) {
    AuxStats& s = stats.at(static_cast<size_t>(group.at(static_cast<size_t>(t))));
    s.tokens += 1;
    s.count.at(static_cast<size_t>(choice[static_cast<size_t>(t * k)])) += 1;
    for (int64_t e = 0; e < p.cols(); ++e) s.value.at(static_cast<size_t>(e)) += p.at(t, e);
  }
}

float load_balance_of(const AuxStats& stats) {
  if (stats.tokens == 0) return 0.0f;
  double aux = 0;
  for (size_t e = 0; e < stats.count.size(); ++e) aux += stats.count[e] * stats.value[e];
  const double t = stats.tokens;
  return static_cast<float>(static_cast<double>(stats.count.size()) * aux / (t * t));
}

void load_balance_backward(const Tensor& p, const AuxGroups& groups, float grad_aux, Tensor& dp) {
  if (grad_aux == 0.0f) return;
  for (int64_t t = 0; t < p.rows(); ++t) {
    const AuxStats& s = groups.of(t);
    const double scale = grad_aux * static_cast<double>(p.cols()) / (s.tokens * s.tokens);
    for (int64_t e = 0; e < p.cols(); ++e)
      dp.at(t, e) += static_cast<float>(scale * s.count.at(static_cast<size_t>(e)));
  }
}

GateOutput softmax_topk_output(const Tensor& p, const std::vector<int>& choice, int experts, int k,
                               bool normalize) {
  GateOutput out;
  out.tokens = static_cast<int>(p.rows());
  out.experts = experts;
  out.per_group = k;
  fill_topk_slots(p, choice, k, normalize, out.token, out.expert, out.weight);
  out.aux_loss = load_balance_loss(p, choice, k);
  return out;
}

Tensor softmax_topk_backward(const Tensor& p, const std::vector<int>& choice, int k, bool normalize,
                             const std::vector<float>& grad_weight, float grad_aux,
                             const AuxGroups& groups) {
  Tensor dp(p.shape());
  topk_slots_backward(p, choice, k, normalize, grad_weight, dp);
  if (groups.empty())
    load_balance_backward(p, choice, k, grad_aux, dp);
  else
    load_balance_backward(p, groups, grad_aux, dp);
  return softmax_rows_backward(p, dp);
}

}  // namespace moecomm::nn
