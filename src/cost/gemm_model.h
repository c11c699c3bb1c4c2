#pragma once
// GEMM time model. FSMoE Eq. 1: t_exp = alpha_gemm + n * beta_gemm per GEMM with n the
// workload (flops); HybridEP Eq. 1: t = flops / (device flops rate).
#include "cost/alpha_beta.h"

namespace moecomm::cost {

// Flops of an [m x k] by [k x n] matrix product (one multiply-add counts as 2 flops).
inline double gemm_flops(double m, double n, double k) {
  return 2.0 * m * n * k;
}

class GemmModel {
 public:
  // From a fitted per-GEMM line (alpha seconds, beta seconds per flop).
  explicit GemmModel(AlphaBeta line) : line_(line) {}
  // From a peak rate and an achieved fraction of it: alpha = 0, beta = 1 / (tflops * eff).
  static GemmModel from_peak(double tflops, double efficiency = 1.0);

  double time(double m, double n, double k) const { return line_.time(gemm_flops(m, n, k)); }
  double time_flops(double flops) const { return line_.time(flops); }
  const AlphaBeta& line() const { return line_; }

 private:
  AlphaBeta line_;
};

}  // namespace moecomm::cost
