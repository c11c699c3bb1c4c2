#include "rt/bf16_wire.h"

#include <cstring>

#include "nn/bf16.h"
#include "rt/row_bytes.h"

namespace moecomm::rt {

void rows_to_bf16(OpBuffer& buf, size_t header) {
  std::vector<std::byte> out;
  size_t at = 0;
  for (int64_t& c : buf.counts) {
    const size_t before = out.size(), n = (size_t(c) - header) / sizeof(float);
    append(out, buf.data.data() + at, header);
    nn::Tensor rows({int64_t(n), 1});
    if (n) std::memcpy(rows.data(), buf.data.data() + at + header, n * sizeof(float));
    const std::vector<uint16_t> half = nn::to_bf16(rows);
    append(out, half.data(), half.size() * sizeof(uint16_t));
    at += size_t(c);
    c = int64_t(out.size() - before);
  }
  for (int64_t& c : buf.recv_counts) c = int64_t(header) + (c - int64_t(header)) / 2;
  buf.data = std::move(out);
}

void rows_from_bf16(OpBuffer& buf, size_t header) {
  std::vector<std::byte> out;
  size_t at = 0;
  for (int64_t& c : buf.counts) {
    const size_t before = out.size(), n = (size_t(c) - header) / sizeof(uint16_t);
    append(out, buf.data.data() + at, header);
    std::vector<uint16_t> half(n);
    if (n) std::memcpy(half.data(), buf.data.data() + at + header, n * sizeof(uint16_t));
    nn::Tensor rows({int64_t(n), 1});
    nn::from_bf16(half, rows);
    append(out, rows.data(), n * sizeof(float));
    at += size_t(c);
    c = int64_t(out.size() - before);
  }
  buf.data = std::move(out);
}

}  // namespace moecomm::rt
