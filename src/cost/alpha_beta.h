#pragma once
// Alpha-beta (latency-bandwidth) model of one operation: t(n) = alpha + n * beta.
// FSMoE Eq. 1 uses it for A2A, AllGather, ReduceScatter, AllReduce and expert GEMMs.
namespace moecomm::cost {

struct AlphaBeta {
  double alpha = 0.0;  // start-up time, seconds
  double beta = 0.0;   // seconds per unit (byte, or flop for compute)

  double time(double n) const { return alpha + n * beta; }
  // FSMoE Eq. 1: each of r chunks carries n / r.
  double chunk_time(double n, int r) const { return alpha + n / r * beta; }
  // FSMoE Section 5: g_inv(t) = (t - alpha) / beta, the size that fits in time t (>= 0).
  double inverse(double t) const;
};

}  // namespace moecomm::cost
