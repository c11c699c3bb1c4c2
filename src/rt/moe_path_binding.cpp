#include "rt/moe_path_binding.h"

#include <algorithm>

namespace moecomm::rt {

void MoeOps::add(const sched::Label& label) {
  using R = sched::OpRole;
  chunks = std::max(chunks, label.chunk + 1);
  const R r = label.role;
  dispatch |= r == R::kDispatchA2A;
  gather |= r == R::kDispatchEspAllGather;
  gather_copy |= r == R::kDispatchEspAllGatherCopy;
  reduce |= r == R::kCombineEspReduceScatter || r == R::kCombineEspAllReduce;
  combine |= r == R::kCombineA2A;
  tp_gather |= r == R::kCombineTpAllGather;
  combine_copy |= r == R::kCombineTpAllGatherCopy;
}

}  // namespace moecomm::rt
