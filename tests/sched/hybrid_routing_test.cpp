#include "sched/hybrid_routing.h"

#include <gtest/gtest.h>

#include <vector>

#include "sched/build_hybridep.h"
#include "support/expect_error.h"

namespace moecomm::sched {
namespace {

// The order hybrid_member_order gives 2 nodes x 4 GPUs with domains {2, 1} (layer_builder_test):
// domains {0, 4}, {1, 5}, {2, 6}, {3, 7}.
const std::vector<int> kOrder = {0, 4, 1, 5, 2, 6, 3, 7};

TEST(HybridRouting, SendsToTheDomainsMemberAtTheSendersOffset) {
  const HybridRouting r(8, 2, kOrder, "-");
  EXPECT_EQ(r.domains(), 4);
  EXPECT_EQ(r.position(5), 3);
  EXPECT_EQ(r.offset(5), 1);
  EXPECT_EQ(r.domain_members(1), (std::vector<int>{1, 5}));
  // Member 5 (offset 1): the second member of every domain, itself for its own.
  EXPECT_EQ(r.destinations(5), (std::vector<int>{4, 5, 6, 7}));
  EXPECT_EQ(r.destinations(0), (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(r.destination(6, 0), 4);
}

TEST(HybridRouting, EmptyOrderIsTheIdentity) {
  const HybridRouting r(6, 3, {}, "-");
  EXPECT_EQ(r.destinations(4), (std::vector<int>{1, 4}));
  EXPECT_EQ(r.domain_members(1), (std::vector<int>{3, 4, 5}));
  // Domains of one: plain EP, every member receives its own experts' rows.
  EXPECT_EQ(HybridRouting(4, 1, {}, "-").destinations(2), (std::vector<int>{0, 1, 2, 3}));
}

// Brute force of Algorithm 1 on every member and expert domain: the destination is in the
// expert's domain, at the sender's offset, and the sender itself when the domain is its own.
TEST(HybridRouting, MatchesAlgorithmOneOnEveryPair) {
  const HybridRouting r(8, 2, kOrder, "-");
  for (int i = 0; i < 8; ++i)
    for (int d = 0; d < 4; ++d) {
      const int to = r.destination(i, d);
      EXPECT_EQ(r.position(to) / 2, d);
      EXPECT_EQ(r.offset(to), r.offset(i));
      if (r.position(i) / 2 == d) {
        EXPECT_EQ(to, i);
      }
    }
}

TEST(HybridRouting, PairsFollowTheRouting) {
  // Member i sends 10 i + j bytes to member j; each sum lands where the routing says.
  std::vector<double> pairs(64);
  for (int i = 0; i < 8; ++i)
    for (int j = 0; j < 8; ++j) pairs[size_t(i * 8 + j)] = 10 * i + j;
  const std::vector<double> out = hybrid_pairs(pairs, 8, 2, kOrder);
  // Member 5 keeps what it sends to its domain {1, 5}; the rest goes to 4, 6, 7 in pairs.
  EXPECT_EQ(std::vector<double>(out.begin() + 40, out.begin() + 48),
            (std::vector<double>{0, 0, 0, 0, 50 + 54, 51 + 55, 52 + 56, 53 + 57}));
}

TEST(HybridRouting, RejectsLayoutsThatDoNotSplit) {
  EXPECT_ERROR_HAS(HybridRouting(4, 3, {}, "strategy: hybrid_domain"),
                   "strategy: hybrid_domain: hybrid_domain=3 must divide the EP group's 4 ranks");
  EXPECT_ERROR_HAS(HybridRouting(4, 0, {}, "-"), "hybrid_domain=0 must divide");
  EXPECT_ERROR_HAS(HybridRouting(4, 2, {0, 0, 1, 2}, "-"), "no permutation");
  EXPECT_ERROR_HAS(HybridRouting(4, 2, {0, 1, 2}, "-"), "no permutation");
  EXPECT_ERROR_HAS(HybridRouting(4, 2, {0, 1, 2, 4}, "-"), "no permutation");
}

}  // namespace
}  // namespace moecomm::sched
