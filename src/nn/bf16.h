#pragma once
// bfloat16 storage for communication buffers: the upper 16 bits of an IEEE fp32, rounded to
// nearest, ties to even. NaN stays NaN (quiet); infinities and signed zeros are kept.
#include <cstdint>
#include <vector>

#include "nn/tensor.h"

namespace moecomm::nn {

uint16_t to_bf16(float x);
float from_bf16(uint16_t h);

std::vector<uint16_t> to_bf16(const Tensor& t);
// Fills t (whose shape gives the element count) from bf16 values.
void from_bf16(const std::vector<uint16_t>& h, Tensor& t);
// t <- from_bf16(to_bf16(t)): what a bf16 wire does to a buffer (e.g. in a dispatch hook).
void round_through_bf16(Tensor& t);

}  // namespace moecomm::nn
