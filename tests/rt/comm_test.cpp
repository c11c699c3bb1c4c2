#include <gtest/gtest.h>

#include <thread>

#include "core/error.h"
#include "mpi_test_util.h"
#include "rt/collectives.h"
#include "rt/group_comms.h"

namespace moecomm::rt {
namespace {

using test::all_ranks;
using test::world_rank;
using test::world_size;

core::ParallelConfig config() {
  core::ParallelConfig c;
  c.tp = c.esp = 2;
  c.dp = c.ep = world_size() / 2;
  c.edp = 1;
  return c;
}

float sum_over(const Comm& comm, float v) {
  all_reduce_sum(comm, std::span<float>(&v, 1), {.label = "test", .timeout_s = test::kTimeout});
  return v;
}

TEST(GroupComms, EachKindAndStreamIsThisRanksGroup) {
  const core::RankGroups groups = core::build_rank_groups(config());
  const GroupComms comms(MPI_COMM_WORLD, groups, 2);
  const int me = world_rank();
  for (const std::string kind : {"world", "tp", "cp", "dp", "pp", "esp", "ep", "edp"}) {
    const core::RankGroup group = kind == "world" ? all_ranks() : groups.of(kind, me);
    for (int stream = 0; stream < 2; ++stream) {
      const Comm& comm = comms.get(kind, stream);
      EXPECT_EQ(comm.group(), group) << kind;
      EXPECT_EQ(comm.my_global_rank(), me) << kind;
      float expected = 0;
      for (int r : group) expected += static_cast<float>(r);
      EXPECT_EQ(sum_over(comm, static_cast<float>(me)), expected) << kind << " stream " << stream;
    }
  }
}

TEST(GroupComms, StreamsRunCollectivesAtOnce) {
  const GroupComms comms(MPI_COMM_WORLD, core::build_rank_groups(config()), 2);
  const Comm& a = comms.get("ep", 0);
  const Comm& b = comms.get("ep", 1);
  ASSERT_NE(a.handle(), b.handle());
  float sum_a = 0, sum_b = 0;
  std::thread other([&] {
    for (int i = 0; i < 20; ++i) sum_b += sum_over(b, 2.0f);
  });
  for (int i = 0; i < 20; ++i) sum_a += sum_over(a, 1.0f);
  other.join();
  EXPECT_EQ(sum_a, 20.0f * a.size());
  EXPECT_EQ(sum_b, 40.0f * b.size());
}

TEST(GroupComms, BadInputThrows) {
  const core::RankGroups groups = core::build_rank_groups(config());
  const GroupComms comms(MPI_COMM_WORLD, groups, 1);
  EXPECT_THROW(comms.get("xp"), Error);
  EXPECT_THROW(comms.get("ep", 1), Error);
  EXPECT_THROW(GroupComms(MPI_COMM_WORLD, groups, 0), Error);
  core::ParallelConfig small;  // a world of 1: would leave ranks without groups
  EXPECT_THROW(GroupComms(MPI_COMM_WORLD, core::build_rank_groups(small), 1), Error);
}

TEST(CommPool, SubgroupsAndBadGroups) {
  const int n = world_size(), me = world_rank();
  const core::RankGroup evens = [&] {
    core::RankGroup g;
    for (int r = 0; r < n; r += 2) g.push_back(r);
    return g;
  }();
  const CommPool pool(MPI_COMM_WORLD, {{evens, 0}, {{1, 0}, 0}, {evens, 0}});
  EXPECT_EQ(pool.has({evens, 0}), me % 2 == 0);
  EXPECT_EQ(pool.has({{1, 0}, 0}), me <= 1);
  if (me == 1) {
    EXPECT_EQ(pool.at({{1, 0}, 0}).rank(), 0);  // member order is the group's
  }
  if (me == 3) {
    EXPECT_THROW(pool.at({evens, 0}), Error);
  }
  EXPECT_THROW(CommPool(MPI_COMM_WORLD, {{{0, n}, 0}}), Error);
  EXPECT_THROW(CommPool(MPI_COMM_WORLD, {{{0, 0}, 0}}), Error);
  EXPECT_THROW(CommPool(MPI_COMM_WORLD, {{{}, 0}}), Error);
}

}  // namespace
}  // namespace moecomm::rt
