#include "nn/moe_hooks.h"

namespace moecomm::nn {

void MoeHooks::run(HookPoint p, Tensor& t) const {
  const Hook* h = nullptr;
  switch (p) {
    case HookPoint::kBeforeMoeStart:
      h = &before_moe_start;
      break;
    case HookPoint::kBeforeDispatch:
      h = &before_dispatch;
      break;
    case HookPoint::kAfterDispatch:
      h = &after_dispatch;
      break;
    case HookPoint::kBeforeCombine:
      h = &before_combine;
      break;
    case HookPoint::kAfterCombine:
      h = &after_combine;
      break;
    case HookPoint::kBeforeMoeEnd:
      h = &before_moe_end;
      break;
  }
  if (h != nullptr && *h) (*h)(t);
}

}  // namespace moecomm::nn
