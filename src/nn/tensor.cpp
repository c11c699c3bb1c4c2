#include "nn/tensor.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <string>

#include "core/error.h"

namespace moecomm::nn {
namespace {

int64_t count_of(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) throw Error("tensor shape", "dimensions must be >= 0, got " + std::to_string(d));
    n *= d;
  }
  return n;
}

}  // namespace

Tensor::Tensor(std::vector<int64_t> shape, float fill)
    : shape_(std::move(shape)), data_(static_cast<size_t>(count_of(shape_)), fill) {}

Tensor::Tensor(std::vector<int64_t> shape, std::vector<float> data)
    : shape_(std::move(shape)), data_(std::move(data)) {
  if (count_of(shape_) != size())
    throw Error("tensor", "shape holds " + std::to_string(count_of(shape_)) +
                              " elements, data has " + std::to_string(size()));
}

int64_t Tensor::cols() const {
  int64_t n = 1;
  for (size_t i = 1; i < shape_.size(); ++i) n *= shape_[i];
  return n;
}

void Tensor::reshape(std::vector<int64_t> shape) {
  if (count_of(shape) != size()) throw Error("tensor reshape", "element count differs");
  shape_ = std::move(shape);
}

void Tensor::fill(float v) {
  for (float& x : data_) x = v;
}

void Tensor::add(const Tensor& other) {
  if (other.size() != size()) throw Error("tensor add", "sizes differ");
  for (size_t i = 0; i < data_.size(); ++i) data_[i] += other.data_[i];
}

Tensor Tensor::slice_rows(int64_t first, int64_t count) const {
  if (first < 0 || count < 0 || first + count > rows())
    throw Error("tensor slice_rows", "rows out of range");
  std::vector<int64_t> shape = shape_;
  shape[0] = count;
  const float* begin = data() + first * cols();
  return Tensor(std::move(shape), std::vector<float>(begin, begin + count * cols()));
}

Tensor Tensor::slice_cols(int64_t first, int64_t count) const {
  if (first < 0 || count < 0 || first + count > cols())
    throw Error("tensor slice_cols", "columns out of range");
  Tensor out({rows(), count});
  for (int64_t r = 0; r < rows(); ++r) std::copy_n(row(r) + first, count, out.row(r));
  return out;
}

void Tensor::set_rows(int64_t first, const Tensor& block) {
  if (block.cols() != cols() || first < 0 || first + block.rows() > rows())
    throw Error("tensor set_rows", "block does not fit");
  std::copy(block.data(), block.data() + block.size(), data() + first * cols());
}

Tensor Tensor::randn(std::vector<int64_t> shape, uint64_t seed, float std) {
  Tensor t(std::move(shape));
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> dist(0.0f, std);
  for (float& x : t.data_) x = dist(rng);
  return t;
}

Tensor Tensor::uniform(std::vector<int64_t> shape, uint64_t seed, float bound) {
  Tensor t(std::move(shape));
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(-bound, bound);
  for (float& x : t.data_) x = dist(rng);
  return t;
}

float max_abs_diff(const Tensor& a, const Tensor& b) {
  if (a.size() != b.size()) throw Error("max_abs_diff", "sizes differ");
  float m = 0;
  for (int64_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(a[i] - b[i]));
  return m;
}

void add_row_vector(Tensor& m, const Tensor& v) {
  for (int64_t r = 0; r < m.rows(); ++r)
    for (int64_t c = 0; c < m.cols(); ++c) m.at(r, c) += v[c];
}

void add_column_sums(const Tensor& m, Tensor& v) {
  for (int64_t r = 0; r < m.rows(); ++r)
    for (int64_t c = 0; c < m.cols(); ++c) v[c] += m.at(r, c);
}

}  // namespace moecomm::nn
