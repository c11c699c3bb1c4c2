#include "plan/hybridep_domains.h"

#include <gtest/gtest.h>

#include <vector>

#include "support/expect_error.h"

namespace moecomm::plan {
namespace {

using C = HybridEpComm;

// HybridEP Table VII: A2A and AllGather GPU-to-GPU counts for EP sizes 8, 16, 32 and expert
// domain sizes 1 (plain EP), 2, 4, ..., EP, one level.
struct TableVIIRow {
  int ep;
  std::vector<long long> a2a;
  std::vector<long long> ag;
};
const std::vector<TableVIIRow> kTableVII = {
    {8, {56, 24, 8, 0}, {0, 8, 24, 56}},
    {16, {240, 112, 48, 16, 0}, {0, 16, 48, 112, 240}},
    {32, {992, 480, 224, 96, 32, 0}, {0, 32, 96, 224, 480, 992}},
};

TEST(HybridEpDomains, TableVIIByAlgorithm1) {
  for (const TableVIIRow& row : kTableVII)
    for (std::size_t i = 0; i < row.a2a.size(); ++i) {
      const int s = 1 << i;
      const auto counts = hybridep_enumerate_comms({row.ep}, {s});
      ASSERT_EQ(counts.size(), 1u);
      EXPECT_EQ(counts[0].all_to_all, row.a2a[i]) << "EP " << row.ep << " S " << s;
      EXPECT_EQ(counts[0].all_gather, row.ag[i]) << "EP " << row.ep << " S " << s;
    }
}

TEST(HybridEpDomains, TableVIIClosedForm) {
  for (const TableVIIRow& row : kTableVII)
    for (std::size_t i = 0; i < row.a2a.size(); ++i) {
      const int s = 1 << i;
      const auto counts = hybridep_count_comms({row.ep}, {s});
      EXPECT_EQ(counts[0].all_to_all, row.a2a[i]) << "EP " << row.ep << " S " << s;
      EXPECT_EQ(counts[0].all_gather, row.ag[i]) << "EP " << row.ep << " S " << s;
    }
}

// HybridEP Fig. 8(b): 4 DCs of 4 GPUs, S_ED^0 = 2, S_ED^1 = 4.
TEST(HybridEpDomains, Algorithm1OnFigure8Example) {
  // Level 0 (DCs): domains {0,1} and {2,3}.
  EXPECT_EQ(hybridep_comm_type({0, 1}, {1, 1}, 0, 2), C::kAllGather);  // same domain
  EXPECT_EQ(hybridep_comm_type({0, 1}, {2, 1}, 0, 2), C::kAllToAll);   // same offset 0
  EXPECT_EQ(hybridep_comm_type({1, 1}, {3, 1}, 0, 2), C::kAllToAll);   // same offset 1
  EXPECT_EQ(hybridep_comm_type({0, 1}, {3, 1}, 0, 2), C::kNone);       // other offset
  EXPECT_EQ(hybridep_comm_type({0, 1}, {0, 1}, 0, 2), C::kNone);       // same worker
  // Level 1 (GPUs of one DC): one domain of 4.
  EXPECT_EQ(hybridep_comm_type({0, 1}, {0, 3}, 1, 4), C::kAllGather);
  EXPECT_EQ(hybridep_comm_type({0, 1}, {0, 3}, 0, 2), C::kNone);  // same DC: not at level 0
  // Level 0 pairs need the same GPU index (Algorithm 1 line 8).
  EXPECT_EQ(hybridep_comm_type({0, 1}, {1, 2}, 0, 2), C::kNone);
}

TEST(HybridEpDomains, PairsAcrossDcsNeverUseTheGpuLevel) {
  // The correction of line 8: GPU 1 of DC 0 and GPU 2 of DC 1 differ at level 0 as well, so
  // they do not communicate over the intra-DC level (the literal Loc[l+1:] test would
  // return AllGather here).
  EXPECT_EQ(hybridep_comm_type({0, 1}, {1, 2}, 1, 4), C::kNone);
  EXPECT_EQ(hybridep_comm_type({0, 1}, {1, 2}, 1, 1), C::kNone);
}

TEST(HybridEpDomains, PlainEpIsAllToAllInsideTheGroup) {
  // S = 1: every worker is its own domain, so every pair at the level is A2A.
  for (int a = 0; a < 4; ++a)
    for (int b = 0; b < 4; ++b)
      EXPECT_EQ(hybridep_comm_type({a}, {b}, 0, 1), a == b ? C::kNone : C::kAllToAll);
}

std::vector<int> divisors_of(int n) {
  std::vector<int> d;
  for (int s = 1; s <= n; ++s)
    if (n % s == 0) d.push_back(s);
  return d;
}

// Every combination of per-level domain sizes of a few shapes: enumeration equals closed form.
TEST(HybridEpDomains, EnumerationMatchesClosedFormOnMultilevelShapes) {
  const std::vector<std::vector<int>> shapes = {{2, 3}, {4, 4}, {3, 4, 2}, {2, 2, 6}, {1, 6}};
  for (const auto& shape : shapes) {
    std::vector<std::vector<int>> combos = {{}};
    for (int count : shape) {
      std::vector<std::vector<int>> next;
      for (const auto& c : combos)
        for (int s : divisors_of(count)) {
          next.push_back(c);
          next.back().push_back(s);
        }
      combos = next;
    }
    for (const auto& sizes : combos) {
      const auto brute = hybridep_enumerate_comms(shape, sizes);
      const auto closed = hybridep_count_comms(shape, sizes);
      ASSERT_EQ(brute.size(), closed.size());
      for (std::size_t l = 0; l < brute.size(); ++l) {
        EXPECT_EQ(brute[l].all_to_all, closed[l].all_to_all);
        EXPECT_EQ(brute[l].all_gather, closed[l].all_gather);
      }
    }
  }
}

TEST(HybridEpDomains, TwoLevelCountsByHand) {
  // 2 DCs x 4 GPUs, S^0 = 2 (both DCs one domain), S^1 = 2.
  const auto counts = hybridep_count_comms({2, 4}, {2, 2});
  EXPECT_EQ(counts[0].all_gather, 8);  // each GPU gathers from its twin in the other DC
  EXPECT_EQ(counts[0].all_to_all, 0);
  EXPECT_EQ(counts[1].all_gather, 8);  // one in-DC partner each
  EXPECT_EQ(counts[1].all_to_all, 8);  // one same-offset GPU in the other in-DC domain
  const HybridEpCommCounts total = hybridep_total_comms(counts);
  EXPECT_EQ(total.all_gather, 16);
  EXPECT_EQ(total.all_to_all, 8);
}

TEST(HybridEpDomains, EachPairUsesAtMostOneLevel) {
  const std::vector<int> shape = {3, 2, 2};
  const std::vector<int> sizes = {3, 1, 2};
  for (int m = 0; m < 12; ++m)
    for (int n = 0; n < 12; ++n) {
      const std::vector<int> lm = {m / 4, m / 2 % 2, m % 2}, ln = {n / 4, n / 2 % 2, n % 2};
      int used = 0;
      for (int l = 0; l < 3; ++l) used += hybridep_comm_type(lm, ln, l, sizes[l]) != C::kNone;
      EXPECT_LE(used, 1);
    }
}

TEST(HybridEpDomains, BadInput) {
  EXPECT_ERROR_HAS(hybridep_comm_type({0, 1}, {0}, 0, 1), "hybridep domains",
                   "different numbers of levels");
  EXPECT_ERROR_HAS(hybridep_comm_type({0, 1}, {0, 2}, 2, 1), "level 2 is outside");
  EXPECT_ERROR_HAS(hybridep_comm_type({0, 1}, {0, 2}, -1, 1), "level -1 is outside");
  EXPECT_ERROR_HAS(hybridep_comm_type({0, 1}, {0, 2}, 1, 0), "domain size must be >= 1");
  EXPECT_ERROR_HAS(hybridep_comm_type({0, -1}, {0, 2}, 1, 1), "coordinates must be >= 0");
  EXPECT_ERROR_HAS(hybridep_count_comms({}, {}), "at least one level");
  EXPECT_ERROR_HAS(hybridep_count_comms({4, 2}, {1}), "one domain size per level");
  EXPECT_ERROR_HAS(hybridep_count_comms({4, 0}, {1, 1}), "level 1", "count must be >= 1");
  EXPECT_ERROR_HAS(hybridep_count_comms({4, 2}, {3, 1}), "level 0", "divide the count 4");
  EXPECT_ERROR_HAS(hybridep_enumerate_comms({4, 2}, {2, 0}), "level 1", "domain size 0");
}

}  // namespace
}  // namespace moecomm::plan
