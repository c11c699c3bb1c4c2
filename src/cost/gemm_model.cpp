#include "cost/gemm_model.h"

#include "core/error.h"

namespace moecomm::cost {

GemmModel GemmModel::from_peak(double tflops, double efficiency) {
  if (!(tflops > 0)) throw Error("gemm model", "device tflops must be positive");
  if (!(efficiency > 0 && efficiency <= 1))
    throw Error("gemm model", "efficiency must be in (0, 1]");
  return GemmModel(AlphaBeta{0.0, 1.0 / (tflops * 1e12 * efficiency)});
}

}  // namespace moecomm::cost
