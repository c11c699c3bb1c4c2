#include "nn/attention.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "core/error.h"
#include "nn/gemm.h"

namespace moecomm::nn {

CausalSelfAttention::CausalSelfAttention(int hidden, int heads, uint64_t seed, int shard,
                                         int shards)
    : hidden_(hidden), heads_(heads), head_dim_(heads > 0 ? hidden / heads : 0) {
  if (hidden <= 0 || heads <= 0 || hidden % heads != 0)
    throw Error("attention", "hidden (" + std::to_string(hidden) +
                                 ") must be a positive multiple of heads (" +
                                 std::to_string(heads) + ")");
  if (shards < 1 || shard < 0 || shard >= shards || heads % shards != 0)
    throw Error("attention", "shard " + std::to_string(shard) + " of " + std::to_string(shards) +
                                 ": tp must divide the " + std::to_string(heads) + " heads");
  heads_ = heads / shards;
  inner_ = heads_ * head_dim_;
  const int first = shard * inner_;
  const float bound = 1.0f / std::sqrt(static_cast<float>(hidden));
  const Tensor wqkv = Tensor::uniform({hidden, 3 * hidden}, seed, bound);
  wqkv_ = Tensor({hidden, 3 * int64_t{inner_}});
  for (int which = 0; which < 3; ++which)  // this shard's heads of Q, K and V
    for (int64_t r = 0; r < hidden; ++r)
      std::copy_n(wqkv.row(r) + which * hidden + first, inner_, wqkv_.row(r) + which * inner_);
  bqkv_ = Tensor({3 * int64_t{inner_}});
  wo_ = Tensor::uniform({hidden, hidden}, seed + 1, bound).slice_rows(first, inner_);
  bo_ = Tensor({hidden});
  output_bias_ = shard == 0;
  dwqkv_ = Tensor(wqkv_.shape());
  dbqkv_ = Tensor(bqkv_.shape());
  dwo_ = Tensor(wo_.shape());
  dbo_ = Tensor(bo_.shape());
}

std::vector<Param> CausalSelfAttention::params() {
  std::vector<Param> p = {
      {"wqkv", &wqkv_, &dwqkv_}, {"bqkv", &bqkv_, &dbqkv_}, {"wo", &wo_, &dwo_}};
  if (output_bias_) p.push_back({"bo", &bo_, &dbo_});
  return p;
}

Tensor CausalSelfAttention::head_block(const Tensor& qkv, int which, int64_t b, int h) const {
  Tensor out({seq_len_, head_dim_});
  const int64_t col = static_cast<int64_t>(which) * inner_ + int64_t{h} * head_dim_;
  for (int64_t s = 0; s < seq_len_; ++s)
    std::copy_n(qkv.row(b * seq_len_ + s) + col, head_dim_, out.row(s));
  return out;
}

void CausalSelfAttention::add_head_block(Tensor& qkv, int which, int64_t b, int h,
                                         const Tensor& block) const {
  const int64_t col = static_cast<int64_t>(which) * inner_ + int64_t{h} * head_dim_;
  for (int64_t s = 0; s < seq_len_; ++s) {
    float* dst = qkv.row(b * seq_len_ + s) + col;
    const float* src = block.row(s);
    for (int d = 0; d < head_dim_; ++d) dst[d] += src[d];
  }
}

Tensor CausalSelfAttention::forward(const Tensor& x, int seq_len) {
  if (x.cols() != hidden_) throw Error("attention", "input width differs from hidden");
  if (seq_len <= 0 || x.rows() % seq_len != 0)
    throw Error("attention", "sequence length " + std::to_string(seq_len) + " must divide " +
                                 std::to_string(x.rows()) + " rows");
  seq_len_ = seq_len;
  const int64_t batch = x.rows() / seq_len, S = seq_len;
  const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim_));
  x_ = x;
  qkv_ = matmul(x, wqkv_);
  add_row_vector(qkv_, bqkv_);
  o_ = Tensor({x.rows(), int64_t{inner_}});
  probs_.assign(static_cast<size_t>(batch * heads_), Tensor());
  for (int64_t b = 0; b < batch; ++b)
    for (int h = 0; h < heads_; ++h) {
      const Tensor q = head_block(qkv_, 0, b, h), k = head_block(qkv_, 1, b, h);
      const Tensor v = head_block(qkv_, 2, b, h);
      Tensor p({S, S});
      gemm(Trans::kNo, Trans::kYes, scale, q, k, 0.0f, p);  // scores
      for (int64_t i = 0; i < S; ++i) {                     // causal softmax over j <= i
        float* row = p.row(i);
        const float mx = *std::max_element(row, row + i + 1);
        float sum = 0.0f;
        for (int64_t j = 0; j <= i; ++j) sum += row[j] = std::exp(row[j] - mx);
        for (int64_t j = 0; j <= i; ++j) row[j] /= sum;
        std::fill(row + i + 1, row + S, 0.0f);
      }
      add_head_block(o_, 0, b, h, matmul(p, v));  // o_ has inner_ columns: "which" 0
      probs_[static_cast<size_t>(b * heads_ + h)] = std::move(p);
    }
  Tensor y = matmul(o_, wo_);
  if (output_bias_) add_row_vector(y, bo_);
  return y;
}

Tensor CausalSelfAttention::backward(const Tensor& dy) {
  if (seq_len_ == 0 || dy.rows() != x_.rows() || dy.cols() != hidden_)
    throw Error("attention", "backward needs a forward first, and dy of its shape");
  const int64_t batch = x_.rows() / seq_len_, S = seq_len_;
  const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim_));
  gemm(Trans::kYes, Trans::kNo, 1.0f, o_, dy, 1.0f, dwo_);  // dWo += O^T dy
  if (output_bias_) add_column_sums(dy, dbo_);
  const Tensor dout = matmul(dy, wo_, Trans::kNo, Trans::kYes);  // dO
  Tensor dqkv({x_.rows(), 3 * int64_t{inner_}});
  for (int64_t b = 0; b < batch; ++b)
    for (int h = 0; h < heads_; ++h) {
      const Tensor& p = probs_[static_cast<size_t>(b * heads_ + h)];
      const Tensor q = head_block(qkv_, 0, b, h), k = head_block(qkv_, 1, b, h);
      const Tensor v = head_block(qkv_, 2, b, h), dob = head_block(dout, 0, b, h);
      add_head_block(dqkv, 2, b, h, matmul(p, dob, Trans::kYes));  // dV = P^T dO
      Tensor ds = matmul(dob, v, Trans::kNo, Trans::kYes);         // dP = dO V^T
      for (int64_t i = 0; i < S; ++i) {  // softmax backward, times the score scale
        float* d = ds.row(i);
        const float* pr = p.row(i);
        float dot = 0.0f;
        for (int64_t j = 0; j <= i; ++j) dot += d[j] * pr[j];
        for (int64_t j = 0; j < S; ++j) d[j] = j <= i ? scale * pr[j] * (d[j] - dot) : 0.0f;
      }
      add_head_block(dqkv, 0, b, h, matmul(ds, k));               // dQ = dS K
      add_head_block(dqkv, 1, b, h, matmul(ds, q, Trans::kYes));  // dK = dS^T Q
    }
  gemm(Trans::kYes, Trans::kNo, 1.0f, x_, dqkv, 1.0f, dwqkv_);  // dWqkv += x^T dqkv
  add_column_sums(dqkv, dbqkv_);
  return matmul(dqkv, wqkv_, Trans::kNo, Trans::kYes);
}

}  // namespace moecomm::nn
