#pragma once
// FSMoE's hooks (Sec. 3.1): callbacks at six points of the MoE layer's forward, each given
// the buffer at that point, which it may modify in place (e.g. compress before dispatch and
// decompress after, or reformat multimodal inputs). Unset hooks are skipped. The backward
// treats hooks as the identity (straight-through): it differentiates the layer as if each
// hook's output had been its input.
#include <functional>

#include "nn/tensor.h"

namespace moecomm::nn {

enum class HookPoint {
  kBeforeMoeStart,  // x [T, M]: the layer's copy of its input, before the gate
  kBeforeDispatch,  // the Order output [rows, M], expert-major over all E experts (send layout)
  kAfterDispatch,   // the dispatched rows [recv, M], local-expert-major
  kBeforeCombine,   // the experts' outputs [recv, M], local-expert-major
  kAfterCombine,    // the combined rows [rows, M], send layout, before I-Order
  kBeforeMoeEnd,    // y [T, M]: the layer's output
};

struct MoeHooks {
  using Hook = std::function<void(Tensor&)>;
  Hook before_moe_start, before_dispatch, after_dispatch, before_combine, after_combine,
      before_moe_end;

  // Runs the hook of point p on t, if set.
  void run(HookPoint p, Tensor& t) const;
};

}  // namespace moecomm::nn
