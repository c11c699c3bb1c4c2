#pragma once
// The MoE A2As' token rows as bfloat16 on the wire (a2a_dtype=bf16; nn/bf16.h: rounded to nearest
// even): each member's block of an A2A buffer is `header` bytes (the layout's int32 counts,
// kept as they are) then fp32 rows, which travel as bf16; compute stays fp32.
#include <cstddef>

#include "rt/executor.h"

namespace moecomm::rt {

// Before the A2A: each block's rows fp32 -> bf16, and the receive counts it expects alike.
void rows_to_bf16(OpBuffer& buf, size_t header);
// After it: each block's rows bf16 -> fp32.
void rows_from_bf16(OpBuffer& buf, size_t header);

}  // namespace moecomm::rt
