#pragma once
// A small row-major fp32 tensor: a shape and contiguous storage (DESIGN.md layer nn).
// The MoE layer's buffers are 2-D: [rows, hidden]; a capacity layout [E, C, M] is stored
// as [E * C, M] rows.
#include <cstddef>
#include <cstdint>
#include <vector>

namespace moecomm::nn {

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::vector<int64_t> shape, float fill = 0.0f);
  Tensor(std::vector<int64_t> shape, std::vector<float> data);  // data.size() must match

  const std::vector<int64_t>& shape() const { return shape_; }
  int dims() const { return static_cast<int>(shape_.size()); }
  int64_t dim(int i) const { return shape_.at(static_cast<size_t>(i)); }
  int64_t size() const { return static_cast<int64_t>(data_.size()); }
  // The first dimension, and the product of the others (a 2-D view).
  int64_t rows() const { return shape_.empty() ? 0 : shape_[0]; }
  int64_t cols() const;

  float* data() { return data_.data(); }
  const float* data() const { return data_.data(); }
  std::vector<float>& values() { return data_; }
  const std::vector<float>& values() const { return data_; }
  float& operator[](int64_t i) { return data_[static_cast<size_t>(i)]; }
  float operator[](int64_t i) const { return data_[static_cast<size_t>(i)]; }
  float& at(int64_t r, int64_t c) { return data_[static_cast<size_t>(r * cols() + c)]; }
  float at(int64_t r, int64_t c) const { return data_[static_cast<size_t>(r * cols() + c)]; }
  float* row(int64_t r) { return data_.data() + r * cols(); }
  const float* row(int64_t r) const { return data_.data() + r * cols(); }

  void reshape(std::vector<int64_t> shape);  // same number of elements
  void fill(float v);
  void add(const Tensor& other);  // elementwise +=, same size
  // Rows [first, first + count) as a new [count, cols] tensor, and the reverse.
  Tensor slice_rows(int64_t first, int64_t count) const;
  // Columns [first, first + count) of a 2-D view, as a new [rows, count] tensor.
  Tensor slice_cols(int64_t first, int64_t count) const;
  void set_rows(int64_t first, const Tensor& block);

  // Deterministic initialisers: N(0, std^2) and U(-bound, bound) from a seeded mt19937_64.
  static Tensor randn(std::vector<int64_t> shape, uint64_t seed, float std = 1.0f);
  static Tensor uniform(std::vector<int64_t> shape, uint64_t seed, float bound);

 private:
  std::vector<int64_t> shape_;
  std::vector<float> data_;
};

// Largest |a - b| over elements (sizes must match).
float max_abs_diff(const Tensor& a, const Tensor& b);
// m[r, :] += v for every row (a bias), and v += the column sums of m (its gradient).
void add_row_vector(Tensor& m, const Tensor& v);
void add_column_sums(const Tensor& m, Tensor& v);

}  // namespace moecomm::nn
