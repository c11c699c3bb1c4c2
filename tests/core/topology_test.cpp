#include "core/topology.h"

#include <gtest/gtest.h>

#include "support/expect_error.h"

namespace moecomm::core {
namespace {

Cluster three_level() {
  Cluster c;
  c.name = "dc";
  c.levels = {{"datacenter", 2, 1.25e9, 1e-3}, {"node", 3, 25e9, 5e-6}, {"gpu", 4, 200e9, 2e-6}};
  return c;
}

TEST(Topology, WorldIsProductOfCounts) {
  EXPECT_EQ(Topology(three_level()).world_size(), 24);
}

TEST(Topology, LocationFollowsHybridEpEq13) {
  Topology t(three_level());
  // m = 17: x0 = 17 / 12 mod 2 = 1, x1 = 17 / 4 mod 3 = 1, x2 = 17 mod 4 = 1.
  EXPECT_EQ(t.location(17), (std::vector<int>{1, 1, 1}));
  EXPECT_EQ(t.location(11), (std::vector<int>{0, 2, 3}));
  for (int r = 0; r < t.world_size(); ++r) EXPECT_EQ(t.rank_of(t.location(r)), r);
}

TEST(Topology, PaperFigure8Example) {
  // HybridEP Fig. 8(b): 4 DCs x 4 GPUs; GPU 6 is DC 1, GPU 2.
  Cluster c;
  c.levels = {{"dc", 4, 1e9, 0}, {"gpu", 4, 16e9, 0}};
  EXPECT_EQ(Topology(c).location(6), (std::vector<int>{1, 2}));
}

TEST(Topology, MeetLevelAndLink) {
  Topology t(three_level());
  EXPECT_EQ(t.meet_level(5, 5), Topology::kSameDevice);
  EXPECT_EQ(t.meet_level(4, 7), 2);   // same node, other GPU
  EXPECT_EQ(t.meet_level(0, 4), 1);   // same datacenter, other node
  EXPECT_EQ(t.meet_level(0, 12), 0);  // other datacenter
  EXPECT_EQ(t.link(0, 12).name, "datacenter");
  EXPECT_DOUBLE_EQ(t.link(4, 7).bandwidth, 200e9);
  EXPECT_EQ(t.meet_level(3, 4), t.meet_level(4, 3));
}

TEST(Topology, PeersWithinAWorker) {
  Topology t(three_level());
  EXPECT_EQ(t.peers_within(5, 1), (std::vector<int>{4, 5, 6, 7}));
  EXPECT_EQ(t.peers_within(13, 0).size(), 12u);
  EXPECT_EQ(t.peers_within(13, 0).front(), 12);
  EXPECT_EQ(t.peers_within(13, 2), (std::vector<int>{13}));
  EXPECT_EQ(t.ranks_per_worker(0), 12);
}

TEST(Topology, Errors) {
  Topology t(three_level());
  EXPECT_ERROR_HAS(t.location(24), "rank 24 out of range");
  EXPECT_ERROR_HAS(t.meet_level(-1, 0), "rank -1 out of range");
  EXPECT_ERROR_HAS(t.link(3, 3), "cross no link", "rank 3");
  EXPECT_ERROR_HAS(t.rank_of({0, 3, 0}), "out of range at level node");
  EXPECT_ERROR_HAS(t.rank_of({0, 0}), "2 levels");
  EXPECT_ERROR_HAS(Topology(Cluster{}), "at least one level");
}

}  // namespace
}  // namespace moecomm::core
