#include "nn/embedding.h"

#include <string>

#include "core/error.h"

namespace moecomm::nn {

Embedding::Embedding(int vocab, int max_seq, int hidden, uint64_t seed, float init_std) {
  if (vocab <= 0 || max_seq <= 0 || hidden <= 0)
    throw Error("embedding", "vocab, max_seq and hidden must be positive");
  tok_ = Tensor::randn({vocab, hidden}, seed, init_std);
  pos_ = Tensor::randn({max_seq, hidden}, seed + 1, init_std);
  dtok_ = Tensor(tok_.shape());
  dpos_ = Tensor(pos_.shape());
}

Tensor Embedding::forward(const std::vector<int>& ids, int seq_len) {
  const int64_t n = static_cast<int64_t>(ids.size());
  if (seq_len <= 0 || seq_len > max_seq() || n % seq_len != 0)
    throw Error("embedding", "sequence length " + std::to_string(seq_len) + " must be in [1, " +
                                 std::to_string(max_seq()) + "] and divide " + std::to_string(n) +
                                 " tokens");
  const int64_t m = hidden();
  Tensor x({n, m});
  for (int64_t t = 0; t < n; ++t) {
    const int id = ids[static_cast<size_t>(t)];
    if (id < 0 || id >= vocab())
      throw Error("embedding", "token id " + std::to_string(id) + " outside [0, " +
                                   std::to_string(vocab()) + ")");
    const float* a = tok_.row(id);
    const float* p = pos_.row(t % seq_len);
    float* o = x.row(t);
    for (int64_t c = 0; c < m; ++c) o[c] = a[c] + p[c];
  }
  ids_ = ids;
  seq_len_ = seq_len;
  return x;
}

void Embedding::backward(const Tensor& dy) {
  const int64_t n = static_cast<int64_t>(ids_.size()), m = hidden();
  if (seq_len_ == 0 || dy.rows() != n || dy.cols() != m)
    throw Error("embedding", "backward needs a forward first, and dy of its shape");
  for (int64_t t = 0; t < n; ++t) {
    const float* g = dy.row(t);
    float* a = dtok_.row(ids_[static_cast<size_t>(t)]);
    float* p = dpos_.row(t % seq_len_);
    for (int64_t c = 0; c < m; ++c) {
      a[c] += g[c];
      p[c] += g[c];
    }
  }
}

}  // namespace moecomm::nn
