// The per-call record behind `moecomm bench --trace`: waits recorded only while armed, on
// numbered threads (the arming one first), and gathered on one rank in rank order.
#include <gtest/gtest.h>

#include <thread>

#include "mpi_test_util.h"
#include "rt/call_trace.h"

namespace moecomm::rt {
namespace {

using Clock = CallTrace::Clock;

TEST(CallTrace, RecordsOnlyWhileArmedWithTheArmingThreadFirst) {
  CallTrace trace;
  const auto t = Clock::now();
  trace.record("before", "x", t, t);
  trace.arm(5);
  std::thread other([&] { trace.record("other", "y", Clock::now(), Clock::now()); });
  other.join();
  trace.record("main", "z", Clock::now(), Clock::now() + std::chrono::milliseconds(2));
  trace.disarm();
  trace.record("after", "x", Clock::now(), Clock::now());
  const std::vector<CallEvent> events = trace.events();
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].label, "other");
  EXPECT_EQ(events[0].thread, 1);
  EXPECT_EQ(events[1].label, "main");
  EXPECT_EQ(events[1].thread, 0);
  EXPECT_EQ(events[1].what, "z");
  EXPECT_EQ(events[1].rank, 5);
  EXPECT_GE(events[1].begin_s, 0);
  EXPECT_NEAR(events[1].end_s - events[1].begin_s, 0.002, 1e-4);
  trace.arm(5);  // re-arming starts over
  EXPECT_TRUE(trace.events().empty());
}

TEST(CallTrace, GathersEveryRanksEventsOnTheRootInRankOrder) {
  const int me = test::world_rank(), n = test::world_size();
  std::vector<CallEvent> mine;
  for (int i = 0; i <= me; ++i)  // rank r sends r + 1 events, labels that need escaping
    mine.push_back({me, i, "a \"label\" [layer " + std::to_string(i) + "]", "", 0.5 * i, 1.0});
  const std::vector<CallEvent> all = gather_call_events(mine, MPI_COMM_WORLD, n - 1);
  if (me != n - 1) {
    EXPECT_TRUE(all.empty());
    return;
  }
  ASSERT_EQ(all.size(), static_cast<size_t>(n * (n + 1) / 2));
  size_t k = 0;
  for (int r = 0; r < n; ++r) {
    for (int i = 0; i <= r; ++i, ++k) {
      EXPECT_EQ(all[k].rank, r);
      EXPECT_EQ(all[k].thread, i);
      EXPECT_EQ(all[k].label, "a \"label\" [layer " + std::to_string(i) + "]");
      EXPECT_EQ(all[k].begin_s, 0.5 * i);
      EXPECT_EQ(all[k].end_s, 1.0);
    }
  }
}

}  // namespace
}  // namespace moecomm::rt
