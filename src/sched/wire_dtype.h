#pragma once
// The dtype token rows travel as in the MoE token A2As (the strategy's a2a_dtype knob) and the
// bytes one row takes on the wire in it.
#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace moecomm::sched {

// fp8 rows carry one fp32 scale per this many values (DeepEP's per-token, per-128-channel
// quantization of the dispatch; DeepSeek-V3 Sec. 3.3.2's 1 x 128 activation tiles).
inline constexpr int64_t kFp8ScaleBlock = 128;

// Per direction of travel, as the token A2As' ops are labelled: dispatch toward the experts
// (the forward's dispatch and the backward's combine gradient), combine back from them (the
// forward's combine and the backward's dispatch gradient). DeepSeek-V3 sends the first as fp8
// and keeps the second in bf16.
struct A2ADtype {
  core::Dtype dispatch = core::Dtype::kFp32;
  core::Dtype combine = core::Dtype::kFp32;
  bool operator==(const A2ADtype&) const = default;
};

// The dtypes the a2a_dtype knob accepts, as written: fp32, bf16, fp8.
const std::vector<core::Dtype>& a2a_wire_dtypes();
std::vector<std::string> a2a_dtype_names();
// "fp8" (both directions) or "DISPATCH/COMBINE" ("fp8/bf16"); throws moecomm::Error naming
// `where` and listing the accepted values on anything else.
A2ADtype parse_a2a_dtype(const std::string& value, const std::string& where);
// The knob's value: "bf16" when both directions agree, else "fp8/bf16".
std::string to_string(const A2ADtype& dtype);

// Bytes of one row of `hidden` values as `dtype`: 4 per value for fp32 (and tf32), 2 for
// bf16 and fp16, 8 for fp64; fp8 takes 1 per value plus one fp32 scale per kFp8ScaleBlock
// values, ceil(hidden / 128) x 4 (hidden 7168: 7168 + 224).
double wire_row_bytes(int64_t hidden, core::Dtype dtype);

}  // namespace moecomm::sched
