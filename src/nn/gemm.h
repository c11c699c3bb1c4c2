#pragma once
// GEMM through CBLAS (OpenBLAS): C = alpha op(A) op(B) + beta C on 2-D row-major tensors
// (a tensor of more dimensions is taken as [rows, cols]).
#include "nn/tensor.h"

namespace moecomm::nn {

enum class Trans { kNo, kYes };

// Shapes: op(A) [m, k], op(B) [k, n], C [m, n]; throws moecomm::Error on a mismatch.
// With beta = 0, C's old contents are ignored (C must already have the shape).
void gemm(Trans ta, Trans tb, float alpha, const Tensor& a, const Tensor& b, float beta, Tensor& c);

// op(A) op(B) into a new [m, n] tensor.
Tensor matmul(const Tensor& a, const Tensor& b, Trans ta = Trans::kNo, Trans tb = Trans::kNo);

}  // namespace moecomm::nn
