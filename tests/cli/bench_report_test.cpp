// `moecomm bench`'s report: errors of the prediction, the JSON fields and the chart.
#include "cli/bench_report.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "support/expect_error.h"

namespace moecomm::cli {
namespace {

BenchRun two_cases() {
  BenchRun run{8, 4, 1, 8, "testbed-moe-s", "profiled.json", 2, 5, {}};
  BenchCase base;
  base.name = "baseline";
  base.measured = {100, 120, 50, 400};
  base.measured_p25 = {95, 110, 45, 390};
  base.measured_p75 = {130, 150, 60, 410};
  base.simulated = {110, 108, 50, 300};
  base.token_bytes.bytes[static_cast<size_t>(rt::LinkLevel::kInterNode)] = 2'000'000;
  BenchCase netmoe = base;
  netmoe.name = "netmoe";
  netmoe.measured = {80, 80, 40, 300};
  netmoe.notes = {"chunks_fwd=1 from the planner"};
  run.cases = {base, netmoe};
  return run;
}

TEST(BenchReport, PredictionErrorIsRelativeToTheMeasurement) {
  EXPECT_DOUBLE_EQ(prediction_error(100, 110), 0.1);
  EXPECT_DOUBLE_EQ(prediction_error(200, 150), -0.25);
  EXPECT_DOUBLE_EQ(prediction_error(0, 0), 0);
  EXPECT_TRUE(std::isinf(prediction_error(0, 1)));
}

TEST(BenchReport, JsonHasEveryCaseWithPhasesErrorsAndTheRatioToTheFirst) {
  const nlohmann::json j = bench_json(two_cases());
  EXPECT_EQ(j["ranks"], 8);
  EXPECT_EQ(j["ranks_per_node"], 4);
  ASSERT_EQ(j["cases"].size(), 2u);
  const auto& base = j["cases"][0];
  EXPECT_EQ(base["measured"]["token_fwd_ms"], 100.0);
  EXPECT_EQ(base["measured_p25"]["token_bwd_ms"], 110.0);
  EXPECT_EQ(base["measured_p75"]["step_ms"], 410.0);
  EXPECT_EQ(base["simulated"]["step_ms"], 300.0);
  EXPECT_DOUBLE_EQ(base["error"]["token_bwd"].get<double>(), -0.1);
  EXPECT_DOUBLE_EQ(base["error"]["step"].get<double>(), -0.25);
  EXPECT_EQ(base["token_bytes"]["inter_node"], 2'000'000);
  EXPECT_DOUBLE_EQ(base["backward_slowdown_ms"].get<double>(), 20.0);
  const auto& netmoe = j["cases"][1];
  EXPECT_DOUBLE_EQ(netmoe["token_ms_vs_first"].get<double>(), 160.0 / 220.0);
  EXPECT_EQ(netmoe["notes"][0], "chunks_fwd=1 from the planner");
}

TEST(BenchReport, TableHasARowPerStrategyAndPhaseWithTheStepsQuartiles) {
  std::ostringstream out;
  print_bench_table(two_cases(), out);
  const std::string t = out.str();
  EXPECT_NE(
      t.find(
          "baseline                     token_bwd        120.00    110.00..150.00         108.00   "
          "-10.0%"),
      std::string::npos)
      << t;
  EXPECT_NE(
      t.find(
          "netmoe                       step             300.00    390.00..410.00         300.00   "
          " +0.0%"),
      std::string::npos)
      << t;
  EXPECT_NE(t.find("-27.3%"), std::string::npos) << t;  // netmoe's token path: 160 / 220 - 1
}

// Each table says which figures are one rank's (a mean over ranks, or the slowest rank) and
// which add up all ranks.
TEST(BenchReport, TablesSayPerRankOrAllRanks) {
  BenchRun run = two_cases();
  run.cases[0].ops = {{"moe.dispatch.a2a", "forward", 16, 2.5, 2.0}};
  std::ostringstream out;
  print_bench_table(run, out);
  const std::string t = out.str();
  for (const char* header :
       {"ms per step: token_fwd, token_bwd and grad_sync the mean over ranks, step the slowest "
        "rank\n",
        "token path per step: token_ms and bwd_slowdown_ms the mean over ranks, inter_node_MB and "
        "allreduce_beside_a2a (rank-ms) the sums over all ranks\n",
        "baseline: per op label, its ops in one step over all ranks, and the mean time of one op "
        "on its rank:\n"
        "  label                        phase     ops/step all ranks  measured_ms simulated_ms    "
        "error\n"
        "  moe.dispatch.a2a             forward                   16        2.500        2.000   "
        "-20.0%\n"}) {
    EXPECT_NE(t.find(header), std::string::npos) << header << "\nin:\n" << t;
  }
}

TEST(BenchReport, SvgHasTwoBarsPerCaseAndPhase) {
  const std::string path = ::testing::TempDir() + "bench_report_test.svg";
  write_bench_svg(two_cases(), path);
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  const std::string svg = ss.str();
  size_t bars = 0;
  for (size_t at = svg.find("<rect"); at != std::string::npos; at = svg.find("<rect", at + 1))
    ++bars;
  EXPECT_EQ(bars, 2u * 4u * 2u + 4u);  // cases x phases x (measured, simulated) + legend
  EXPECT_NE(svg.find("netmoe token_bwd simulated 108 ms"), std::string::npos);
  std::filesystem::remove(path);
}

TEST(BenchReport, UnwritableSvgNamesTheFlag) {
  EXPECT_ERROR_HAS(write_bench_svg(two_cases(), "/nonexistent-dir/x.svg"), "--svg",
                   "cannot be written");
}

}  // namespace
}  // namespace moecomm::cli
