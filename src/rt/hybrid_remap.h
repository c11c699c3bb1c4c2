#pragma once
// HybridEP's token A2A on the schedule's EP-wide A2A (hybridep.txt Algorithm 1): the MoE
// layers exchange tokens with one member per domain (exchange rank j: where
// sched::HybridRouting sends this member's rows for domain j's experts), which sit at other
// positions of the EP group's A2A. Blocks move between the two orders around the A2A.
#include <vector>

#include "rt/executor.h"

namespace moecomm::rt {

class HybridRemap {
 public:
  HybridRemap() = default;  // plain EP: exchange rank j is A2A member j
  // This A2A member `member` of `a2a_size`, domains of `domain` positions of `order`
  // (empty: the identity).
  HybridRemap(int a2a_size, int domain, const std::vector<int>& order, int member);

  bool identity() const { return member_of_.empty(); }
  // The A2A member of exchange rank j.
  int member(int j) const { return identity() ? j : member_of_[size_t(j)]; }
  // Exchange-rank blocks (and expected receive counts) -> the A2A's members; the others send
  // and receive nothing.
  OpBuffer* to_members(OpBuffer& buf) const;
  // What the A2A received, by member -> by exchange rank.
  void from_members(OpBuffer& buf) const;

 private:
  int a2a_size_ = 0;
  std::vector<int> member_of_;
};

}  // namespace moecomm::rt
