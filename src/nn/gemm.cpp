#include "nn/gemm.h"

#include <cblas.h>

#include <string>

#include "core/error.h"

namespace moecomm::nn {
namespace {

int64_t op_rows(const Tensor& t, Trans tr) {
  return tr == Trans::kNo ? t.rows() : t.cols();
}
int64_t op_cols(const Tensor& t, Trans tr) {
  return tr == Trans::kNo ? t.cols() : t.rows();
}
CBLAS_TRANSPOSE cblas_of(Trans tr) {
  return tr == Trans::kNo ? CblasNoTrans : CblasTrans;
}

}  // namespace

void gemm(Trans ta, Trans tb, float alpha, const Tensor& a, const Tensor& b, float beta,
          Tensor& c) {
  const int64_t m = op_rows(a, ta), k = op_cols(a, ta), n = op_cols(b, tb);
  if (op_rows(b, tb) != k || c.rows() != m || c.cols() != n)
    throw Error("gemm", "shapes do not match: op(A) " + std::to_string(m) + "x" +
                            std::to_string(k) + ", op(B) " + std::to_string(op_rows(b, tb)) + "x" +
                            std::to_string(n) + ", C " + std::to_string(c.rows()) + "x" +
                            std::to_string(c.cols()));
  if (m == 0 || n == 0) return;
  if (k == 0) {  // op(A) op(B) is zero
    for (int64_t i = 0; i < c.size(); ++i) c[i] = beta == 0.0f ? 0.0f : beta * c[i];
    return;
  }
  const int lda = static_cast<int>(a.cols()), ldb = static_cast<int>(b.cols());
  cblas_sgemm(CblasRowMajor, cblas_of(ta), cblas_of(tb), static_cast<int>(m), static_cast<int>(n),
              static_cast<int>(k), alpha, a.data(), lda, b.data(), ldb, beta, c.data(),
              static_cast<int>(n));
}

Tensor matmul(const Tensor& a, const Tensor& b, Trans ta, Trans tb) {
  Tensor c({op_rows(a, ta), op_cols(b, tb)});
  gemm(ta, tb, 1.0f, a, b, 0.0f, c);
  return c;
}

}  // namespace moecomm::nn
