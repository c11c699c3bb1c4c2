// `profile --from-nccl-tests` on fixture files in nccl-tests' layout (tests/data/nccl_tests),
// then `sim --collective` on the fitted cluster at every size of every fixture: the bus
// bandwidth within 5% of the fixture's.
#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cost/nccl_tests_output.h"
#include "support/cli_runner.h"

namespace moecomm::cli {
namespace {

using testing::has;
using testing::run_cli;

const std::string kDir = std::string(MOECOMM_TEST_DATA_DIR) + "/nccl_tests/";
const std::vector<std::string> kFixtures = {"all_reduce_perf.1x8.txt", "alltoall_perf.1x8.txt",
                                            "all_gather_perf.1x8.txt", "alltoall_perf.2x8.txt",
                                            "alltoall_perf.4x8.txt",   "all_reduce_perf.2x8.txt"};

std::vector<std::string> profile_args(const std::string& out) {
  std::vector<std::string> args = {"profile", "--from-nccl-tests"};
  for (const auto& f : kFixtures) args.push_back(kDir + f);
  args.insert(args.end(), {"-o", out});
  return args;
}

TEST(ProfileNcclTests, SimCollectiveReproducesEveryFixtureRowWithin5Percent) {
  const std::string out = ::testing::TempDir() + "nccl-fit.json";
  auto args = profile_args(out);
  args.push_back("--json");
  const auto r = run_cli(args);
  ASSERT_EQ(r.code, 0) << r.err;
  const auto report = nlohmann::json::parse(r.out);
  EXPECT_LT(report["worst_deviation"].get<double>(), 0.05);
  std::ifstream f(out);
  const auto cluster = nlohmann::json::parse(f);
  ASSERT_EQ(cluster["levels"].size(), 2u);
  EXPECT_EQ(cluster["levels"][0]["name"], "node");
  EXPECT_EQ(cluster["levels"][0]["count"], 4);  // the largest run's nodes
  EXPECT_EQ(cluster["levels"][1]["name"], "gpu");
  EXPECT_EQ(cluster["levels"][1]["count"], 8);
  EXPECT_TRUE(cluster["efficiency"]["node"].contains("alltoall"));
  EXPECT_TRUE(cluster["efficiency"]["gpu"].contains("allgather"));
  int rows = 0;
  for (const auto& fixture : kFixtures) {
    const cost::NcclTestsRun run = cost::read_nccl_tests(kDir + fixture);
    const auto sim = run_cli({"sim", "--cluster", out, "--collective", run.collective, "--group",
                              "0-" + std::to_string(run.ranks - 1), "--sizes", "1M:4G", "--json"});
    ASSERT_EQ(sim.code, 0) << sim.err;
    const auto j = nlohmann::json::parse(sim.out);
    ASSERT_EQ(j["rows"].size(), run.rows.size()) << fixture;
    for (size_t i = 0; i < run.rows.size(); ++i) {
      const auto& row = j["rows"][i];
      ASSERT_EQ(row["size_bytes"].get<double>(), run.rows[i].bytes);
      const double fixture_busbw = run.rows[i].busbw / 1e9;  // as the file prints it
      EXPECT_NEAR(row["busbw_GBps"].get<double>(), fixture_busbw, 0.05 * fixture_busbw)
          << fixture << " at " << run.rows[i].bytes << " bytes";
      ++rows;
    }
  }
  EXPECT_EQ(rows, 6 * 13);
}

TEST(ProfileNcclTests, TheTablePutsMeasuredBesideSimulated) {
  const std::string out = ::testing::TempDir() + "nccl-fit-table.json";
  const auto r = run_cli(profile_args(out));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(has(r.out, "fitted nccl-tests-4x8 from 6 nccl-tests file(s)")) << r.out;
  EXPECT_TRUE(has(r.out, "alltoall_perf.2x8.txt:38 alltoall         16   4294967296     19.92"))
      << r.out;
  EXPECT_TRUE(has(r.out, "wrote " + out)) << r.out;
}

TEST(ProfileNcclTests, InconsistentInputsAndMeasuringFlagsAreRefused) {
  const std::string out = ::testing::TempDir() + "nccl-fit-bad.json";
  auto r = run_cli({"profile", "--from-nccl-tests", kDir + "alltoall_perf.2x8.txt", "-o", out});
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(
      has(r.err, "alltoall_perf.2x8.txt: spans several nodes, but no file measures one node"))
      << r.err;
  r = run_cli({"profile", "--from-nccl-tests", kDir + "alltoall_perf.1x8.txt", "--min-bytes", "4K",
               "-o", out});
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(has(r.err, "--min-bytes: measures; --from-nccl-tests fits files")) << r.err;
  r = run_cli({"profile", "--from-nccl-tests", kDir + "a100-2x8-4nic.json", "-o", out});
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(has(r.err, "cannot tell which collective")) << r.err;
}

}  // namespace
}  // namespace moecomm::cli
