#include "rt/link_bytes.h"

namespace moecomm::rt {

std::string_view to_string(LinkLevel level) {
  switch (level) {
    case LinkLevel::kSameDevice:
      return "same_device";
    case LinkLevel::kIntraNode:
      return "intra_node";
    case LinkLevel::kInterNode:
      return "inter_node";
  }
  return "?";
}

LinkLevel link_level(int from, int to, int ranks_per_node) {
  if (from == to) return LinkLevel::kSameDevice;
  const int rpn = ranks_per_node > 0 ? ranks_per_node : 1;
  return from / rpn == to / rpn ? LinkLevel::kIntraNode : LinkLevel::kInterNode;
}

}  // namespace moecomm::rt
