// The fit of `profile --from-nccl-tests` on noise-free runs made from the simulator's own
// model: every row comes back to within 1e-9, the bandwidth is the best any row shows and
// the efficiency is 1 there.
#include "plan/nccl_calibration.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "core/presets.h"
#include "support/expect_error.h"

namespace moecomm::plan {
namespace {

using cost::NcclTestsRun;

// e(S) rising from about 0.3 at 1 MiB to 0.9.
double eff(double bytes) {
  return 0.9 * bytes / (bytes + 2e6);
}

NcclTestsRun run(const std::string& collective, int nodes, int per_node, double latency,
                 double bandwidth) {
  NcclTestsRun r;
  r.where = collective + "." + std::to_string(nodes) + "x" + std::to_string(per_node);
  r.collective = collective;
  r.nodes = nodes;
  r.ranks = nodes * per_node;
  const int n = r.ranks;
  for (int i = 0; i < 8; ++i) {
    const double s = double(1 << 20) * (1 << i);
    double t = 0;
    if (collective == "allreduce") {
      t = 2 * (n - 1) * latency + 2.0 * (n - 1) / n * s / (bandwidth * eff(s));
    } else {  // alltoall: the busiest link of the outermost level crossed
      const double c = nodes > 1 ? double(per_node) * (n - per_node) / n : (n - 1.0) / n;
      t = latency + c * s / (bandwidth * eff(s));
    }
    r.rows.push_back({s, t, 0, i + 1});
  }
  return r;
}

TEST(NcclCalibration, NoiseFreeRunsComeBackExactly) {
  const core::Cluster base = core::load_cluster("monta-a800-2x8");
  const std::vector<NcclTestsRun> runs = {run("allreduce", 1, 8, 1e-6, 200e9),
                                          run("alltoall", 1, 8, 3e-6, 200e9),
                                          run("alltoall", 2, 8, 10e-6, 100e9)};
  const NcclCalibration fit = calibrate_from_nccl_tests(runs, base, "fit");
  ASSERT_EQ(fit.cluster.levels.size(), 2u);
  EXPECT_EQ(fit.cluster.levels[0].name, "node");
  EXPECT_EQ(fit.cluster.levels[0].count, 2);
  EXPECT_EQ(fit.cluster.levels[1].name, "gpu");
  EXPECT_EQ(fit.cluster.levels[1].count, 8);
  EXPECT_EQ(fit.cluster.device.flops, base.device.flops);  // the device is the base's
  ASSERT_EQ(fit.checks.size(), 24u);
  for (const NcclCheck& c : fit.checks)
    EXPECT_NEAR(c.fitted_busbw, c.measured_busbw, 1e-9 * c.measured_busbw) << c.where;
  for (const auto& [level, curves] : fit.cluster.efficiency) {
    double best = 0;
    for (const auto& [collective, points] : curves)
      for (const auto& [bytes, e] : points) best = std::max(best, e);
    EXPECT_DOUBLE_EQ(best, 1.0) << level;  // the bandwidth is the best row's
  }
  EXPECT_TRUE(fit.notes.empty());
}

TEST(NcclCalibration, InconsistentRunsAreRefused) {
  const core::Cluster base = core::load_cluster("monta-a800-2x8");
  EXPECT_ERROR_HAS(calibrate_from_nccl_tests({run("alltoall", 2, 8, 1e-5, 1e11)}, base, "x"),
                   "alltoall.2x8", "no file measures one node");
  EXPECT_ERROR_HAS(
      calibrate_from_nccl_tests(
          {run("alltoall", 1, 8, 1e-6, 1e11), run("alltoall", 2, 4, 1e-5, 1e11)}, base, "x"),
      "alltoall.2x4", "4 ranks per node, but alltoall.1x8 has 8");
  EXPECT_ERROR_HAS(calibrate_from_nccl_tests({}, base, "x"), "no files");
}

}  // namespace
}  // namespace moecomm::plan
