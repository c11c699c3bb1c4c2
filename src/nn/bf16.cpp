#include "nn/bf16.h"

#include <cstring>

#include "core/error.h"

namespace moecomm::nn {

uint16_t to_bf16(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  if ((bits & 0x7f800000u) == 0x7f800000u && (bits & 0x007fffffu) != 0)
    return static_cast<uint16_t>((bits >> 16) | 0x0040u);  // quiet NaN
  const uint32_t lsb = (bits >> 16) & 1u;                  // ties to even
  bits += 0x7fffu + lsb;
  return static_cast<uint16_t>(bits >> 16);
}

float from_bf16(uint16_t h) {
  const uint32_t bits = static_cast<uint32_t>(h) << 16;
  float x;
  std::memcpy(&x, &bits, sizeof x);
  return x;
}

std::vector<uint16_t> to_bf16(const Tensor& t) {
  std::vector<uint16_t> h(static_cast<size_t>(t.size()));
  for (int64_t i = 0; i < t.size(); ++i) h[static_cast<size_t>(i)] = to_bf16(t[i]);
  return h;
}

void from_bf16(const std::vector<uint16_t>& h, Tensor& t) {
  if (static_cast<int64_t>(h.size()) != t.size()) throw Error("from_bf16", "sizes differ");
  for (int64_t i = 0; i < t.size(); ++i) t[i] = from_bf16(h[static_cast<size_t>(i)]);
}

void round_through_bf16(Tensor& t) {
  for (int64_t i = 0; i < t.size(); ++i) t[i] = from_bf16(to_bf16(t[i]));
}

}  // namespace moecomm::nn
