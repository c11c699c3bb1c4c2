#pragma once
// Token rows and their collectives' byte buffers (rt::OpBuffer): fp32 rows of `cols` floats,
// blocks of bytes back to back, one per member.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "nn/tensor.h"

namespace moecomm::rt {

inline void append(std::vector<std::byte>& out, const void* data, size_t bytes) {
  const auto* p = static_cast<const std::byte*>(data);
  out.insert(out.end(), p, p + bytes);
}

inline nn::Tensor tensor_of(const std::byte* data, size_t bytes, int64_t cols) {
  const int64_t values = int64_t(bytes / sizeof(float));
  nn::Tensor t({cols > 0 ? values / cols : 0, cols});
  if (values > 0) std::memcpy(t.data(), data, size_t(values) * sizeof(float));
  return t;
}

inline nn::Tensor tensor_of(const std::vector<std::byte>& data, int64_t cols) {
  return tensor_of(data.data(), data.size(), cols);
}

inline std::vector<std::byte> bytes_of(const nn::Tensor& t) {
  std::vector<std::byte> out;
  append(out, t.data(), size_t(t.size()) * sizeof(float));
  return out;
}

// Blocks of `counts[j]` bytes each, back to back -> one tensor per block.
inline std::vector<nn::Tensor> split_blocks(const std::vector<std::byte>& data,
                                            const std::vector<int64_t>& counts, int64_t cols) {
  std::vector<nn::Tensor> out;
  size_t at = 0;
  for (int64_t c : counts) {
    out.push_back(tensor_of(data.data() + at, size_t(c), cols));
    at += size_t(c);
  }
  return out;
}

// Blocks of `counts` bytes in `data` -> per block its bytes.
inline std::vector<std::vector<std::byte>> blocks_of(const std::vector<std::byte>& data,
                                                     const std::vector<int64_t>& counts) {
  std::vector<std::vector<std::byte>> out;
  size_t at = 0;
  for (int64_t c : counts) {
    out.emplace_back(data.begin() + std::ptrdiff_t(at),
                     data.begin() + std::ptrdiff_t(at + size_t(c)));
    at += size_t(c);
  }
  return out;
}

}  // namespace moecomm::rt
