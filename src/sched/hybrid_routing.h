#pragma once
// Where HybridEP sends a token row (hybridep.txt Sec. IV-A, Algorithm 1): the one statement of
// the rule that the schedule's A2A pairs (hybrid_pairs), the MPI runtime's peers
// (rt::hybrid_layout, rt::HybridRemap) and moecomm.torch's exchange keys all ask.
#include <string>
#include <vector>

namespace moecomm::sched {

// An EP group of n members, in the order of hybrid_member_order (position -> member index;
// empty: the identity), split into domains of `domain` consecutive positions. The member at
// position p owns experts [p L, (p + 1) L). A row for an expert of the sender's own domain
// stays with the sender (the domain AllGather gave it a copy of that expert); a row for an
// expert of another domain goes to the member of that domain at the sender's offset (the A2A
// between equal offsets).
class HybridRouting {
 public:
  // Throws moecomm::Error naming `where` unless `domain` divides n and `order` is empty or a
  // permutation of 0..n-1.
  HybridRouting(int n, int domain, std::vector<int> order, const std::string& where);

  int members() const { return static_cast<int>(order_.size()); }
  int domain() const { return domain_; }
  int domains() const { return members() / domain_; }
  int position(int member) const { return position_.at(static_cast<size_t>(member)); }
  int offset(int member) const { return position(member) % domain_; }
  // The EP member that a row of `member` for an expert of domain `d` is sent to; `member`
  // itself for its own domain.
  int destination(int member, int d) const {
    return order_.at(static_cast<size_t>(d * domain_ + offset(member)));
  }
  // destination(member, d) for d = 0..domains()-1: the members `member` exchanges tokens with.
  std::vector<int> destinations(int member) const;
  // The members of domain d, in position order (they gather each other's experts).
  std::vector<int> domain_members(int d) const;

 private:
  int domain_;
  std::vector<int> order_;     // position -> member
  std::vector<int> position_;  // member -> position
};

}  // namespace moecomm::sched
