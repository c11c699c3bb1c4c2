#pragma once
// Bytes a rank sent, by the link level they crossed (same device, intra-node, inter-node),
// so a training step can report its A2A traffic by level as the placement issue counts it.
#include <array>
#include <cstdint>
#include <string_view>

namespace moecomm::rt {

enum class LinkLevel : uint8_t { kSameDevice, kIntraNode, kInterNode };
inline constexpr int kNumLinkLevels = 3;
std::string_view to_string(LinkLevel level);

// Ranks share a node when rank / ranks_per_node is equal.
LinkLevel link_level(int from, int to, int ranks_per_node);

struct LinkBytes {
  std::array<int64_t, kNumLinkLevels> bytes{};

  void add(int from, int to, int64_t n, int ranks_per_node) {
    bytes[static_cast<int>(link_level(from, to, ranks_per_node))] += n;
  }
  int64_t operator[](LinkLevel level) const { return bytes[static_cast<int>(level)]; }
  int64_t total() const { return bytes[0] + bytes[1] + bytes[2]; }
  LinkBytes& operator+=(const LinkBytes& o) {
    for (int i = 0; i < kNumLinkLevels; ++i) bytes[i] += o.bytes[i];
    return *this;
  }
  bool operator==(const LinkBytes&) const = default;
};

}  // namespace moecomm::rt
