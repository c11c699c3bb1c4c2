// `moecomm sim --collective`: the cluster's prediction printed as nccl-tests prints a sweep.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/sim_collective.h"
#include "support/cli_runner.h"
#include "support/expect_error.h"

namespace moecomm::cli {
namespace {

using testing::has;
using testing::run_cli;

const std::string kCluster = std::string(MOECOMM_TEST_DATA_DIR) + "/nccl_tests/a100-2x8-4nic.json";

TEST(SimCollective, SizesDoubleFromTheFirstToTheLast) {
  EXPECT_EQ(parse_size_sweep("1M:8M", "--sizes"),
            (std::vector<int64_t>{1 << 20, 2 << 20, 4 << 20, 8 << 20}));
  EXPECT_EQ(parse_size_sweep("1M:12M", "--sizes"),
            (std::vector<int64_t>{1 << 20, 2 << 20, 4 << 20, 8 << 20}));
  EXPECT_EQ(parse_size_sweep("4G", "--sizes"), (std::vector<int64_t>{int64_t{4} << 30}));
  EXPECT_ERROR_HAS(parse_size_sweep("4G:1M", "--sizes"), "--sizes", "larger than the last");
  EXPECT_ERROR_HAS(parse_size_sweep("1M:2T", "--sizes"), "--sizes", "is not a size");
  EXPECT_ERROR_HAS(parse_size_sweep("0:1M", "--sizes"), "between 1 byte and 1TiB");
}

TEST(SimCollective, JsonRowsHaveNcclTestsFigures) {
  const auto r = run_cli({"sim", "--collective", "alltoall", "--cluster", kCluster, "--sizes",
                          "1M:4M", "--completion-tolerance", "0", "--json"});
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["collective"], "alltoall");
  EXPECT_EQ(j["ranks"], 16);
  EXPECT_EQ(j["group"], "0-15");
  ASSERT_EQ(j["rows"].size(), 3u);
  int64_t size = 1 << 20;
  for (const auto& row : j["rows"]) {
    EXPECT_EQ(row["size_bytes"].get<int64_t>(), size);
    // 4S through each node's 100 GB/s: algbw 25 GB/s, busbw 15/16 of it.
    EXPECT_DOUBLE_EQ(row["time_us"].get<double>(), 4.0 * size / 100e9 * 1e6);
    EXPECT_DOUBLE_EQ(row["algbw_GBps"].get<double>(), 25.0);
    EXPECT_DOUBLE_EQ(row["busbw_GBps"].get<double>(), 23.4375);
    size *= 2;
  }
}

TEST(SimCollective, TableIsNcclTestsLayout) {
  const auto r = run_cli({"sim", "--collective", "allreduce", "--cluster", kCluster, "--sizes",
                          "1G", "--group", "0-7"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(has(r.out, "8 ranks (0-7)")) << r.out;
  EXPECT_TRUE(has(r.out, "#       size     time   algbw   busbw\n")) << r.out;
  EXPECT_TRUE(has(r.out, "#        (B)     (us)  (GB/s)  (GB/s)\n")) << r.out;
  // 2 x 7/8 GiB over 300 GB/s NVLink: 6263.49 us, algbw 171.43, busbw 300.
  EXPECT_TRUE(has(r.out, "  1073741824  6263.49  171.43  300.00\n")) << r.out;
  EXPECT_TRUE(has(r.out, "# Avg bus bandwidth    : 300\n")) << r.out;
}

TEST(SimCollective, FlagsOfTheStepModeAreRefused) {
  auto r =
      run_cli({"sim", "--collective", "allgather", "--cluster", kCluster, "--strategy", "lina"});
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(has(r.err, "--strategy: does not apply to --collective")) << r.err;
  r = run_cli({"sim", "--sizes", "1M"});
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(has(r.err, "--sizes: applies only to --collective")) << r.err;
  r = run_cli({"sim", "--collective", "all_reduce", "--cluster", kCluster});
  EXPECT_NE(r.code, 0);
  r = run_cli({"sim", "--collective", "alltoall", "--cluster", kCluster, "--group", "3"});
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(has(r.err, "--group: a collective needs at least 2 ranks")) << r.err;
}

}  // namespace
}  // namespace moecomm::cli
