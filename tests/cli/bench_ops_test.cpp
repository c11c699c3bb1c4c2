#include "cli/bench_ops.h"

#include <gtest/gtest.h>

namespace moecomm::cli {
namespace {

// Two ranks, each with a forward gate op and a backward one; the measured run repeats twice.
TEST(BenchOps, MeanTimeOfOneOpPerLabelMeasuredBesideSimulated) {
  sched::Schedule s(2);
  const sched::Label fwd{sched::OpRole::kGate, 0, sched::Phase::kForward, -1, ""};
  const sched::Label bwd{sched::OpRole::kGate, 0, sched::Phase::kBackward, -1, ""};
  for (int r = 0; r < 2; ++r) {
    s.add_compute(r, 0, 1, 0, fwd);
    s.add_compute(r, 0, 1, 0, bwd);
  }
  // Op ids: rank 0 fwd 0, bwd 1; rank 1 fwd 2, bwd 3.
  const std::vector<std::vector<rt::OpTime>> measured = {
      {{0, 1e-3}, {1e-3, 5e-3}, {0, 3e-3}, {3e-3, 7e-3}},
      {{0, 3e-3}, {3e-3, 7e-3}, {0, 1e-3}, {-1, -1}}};  // rank 1's last op did not run
  sim::SimResult r;
  r.ops = {{0, 2e-3, 0}, {2e-3, 4e-3, 0}, {0, 2e-3, 0}, {2e-3, 4e-3, 0}};
  const std::vector<OpComparison> rows = compare_ops(s, measured, s, r);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].phase, "backward");  // the most measured time per step first
  EXPECT_EQ(rows[0].name, "gate");
  EXPECT_EQ(rows[0].ops, 2);  // 3 runs over 2 steps, rounded
  EXPECT_DOUBLE_EQ(rows[0].measured_ms, 4.0);
  EXPECT_DOUBLE_EQ(rows[0].simulated_ms, 2.0);
  EXPECT_EQ(rows[1].phase, "forward");
  EXPECT_EQ(rows[1].ops, 2);
  EXPECT_DOUBLE_EQ(rows[1].measured_ms, 2.0);
  EXPECT_DOUBLE_EQ(rows[1].simulated_ms, 2.0);
}

}  // namespace
}  // namespace moecomm::cli
