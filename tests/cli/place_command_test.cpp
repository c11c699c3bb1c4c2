#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "cli/app.h"
#include "support/cli_runner.h"

namespace moecomm::cli {
namespace {

using testing::has;
using testing::Result;
using testing::run_cli;

const std::string kCounts = std::string(MOECOMM_TEST_DATA_DIR) + "/place/counts_2x2.json";

// The counts file is the traffic test's hand-worked instance (8 inter-node and 7 intra-node
// tokens at home). Optimality itself is checked against brute force in sample_placer_test;
// here the command must report the instance and agree across solvers.
TEST(PlaceCommand, CountsJsonHasThePlacementAndTokensBeforeAndAfter) {
  Result r = run_cli({"place", "--counts", kCounts, "--json", "--cluster", "netmoe-a800-4x8"});
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["inter_node_tokens"]["before"], 8);
  EXPECT_EQ(j["intra_node_tokens"]["before"], 7);
  EXPECT_EQ(j["sample_device"].size(), 4u);
  EXPECT_LE(j["inter_node_tokens"]["after"].get<int>(), 8);
  EXPECT_TRUE(j["solve_us"].is_number());
  EXPECT_EQ(j["nodes"], 2);
  // Every solver reports the same optimum.
  for (const char* solver : {"km", "ilp", "lemon-ns"}) {
    Result other = run_cli({"place", "--counts", kCounts, "--json", "--solver", solver});
    ASSERT_EQ(other.code, 0) << other.err;
    EXPECT_EQ(nlohmann::json::parse(other.out)["inter_node_tokens"]["after"],
              j["inter_node_tokens"]["after"])
        << solver;
  }
}

TEST(PlaceCommand, SyntheticTableNamesWhatItShows) {
  Result r = run_cli({"place", "--synthetic", "--cluster", "netmoe-a800-2x8", "--tokens", "128",
                      "--layers", "3", "--iterations", "2"});
  ASSERT_EQ(r.code, 0) << r.err;
  for (const char* part : {"inter-node MB", "intra-node MB", "A2A ms", "across nodes",
                           "solve: mean", "prediction of layer l+1", "2 nodes x 8 devices"}) {
    EXPECT_TRUE(has(r.out, part)) << part << "\n" << r.out;
  }
}

// The tables' first column says what the figures cover: every device (all samples) together.
TEST(PlaceCommand, TablesSayTheyCoverAllDevices) {
  Result r = run_cli({"place", "--cluster", "netmoe-a800-2x8", "--tokens", "64", "--layers", "2",
                      "--iterations", "2"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(
      has(r.out, "mean pair, all devices       before        after    change       oracle\n"))
      << r.out;
  r = run_cli({"place", "--counts", kCounts});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(has(r.out,
                  "all samples, one A2A         before        after    change\n"
                  "inter-node tokens                 8"))
      << r.out;
}

TEST(PlaceCommand, JsonOverATraceWrittenAndReadBack) {
  const std::string trace = ::testing::TempDir() + "/place_cli_trace.json";
  Result a = run_cli({"place", "--json", "--cluster", "netmoe-a800-2x8", "--tokens", "64",
                      "--layers", "3", "--iterations", "2", "--write-trace", trace});
  ASSERT_EQ(a.code, 0) << a.err;
  Result b = run_cli({"place", "--json", "--cluster", "netmoe-a800-2x8", "--trace", trace});
  ASSERT_EQ(b.code, 0) << b.err;
  const auto ja = nlohmann::json::parse(a.out), jb = nlohmann::json::parse(b.out);
  EXPECT_EQ(ja["pairs"].size(), 4u);
  // Same routing, same placements: the traffic figures agree exactly.
  EXPECT_EQ(ja["summary"]["inter_node_tokens"], jb["summary"]["inter_node_tokens"]);
  EXPECT_EQ(ja["summary"]["intra_node_tokens"], jb["summary"]["intra_node_tokens"]);
  EXPECT_EQ(jb["samples"], 64);
  EXPECT_EQ(jb["experts"], 32);
}

TEST(PlaceCommand, BadInputIsAClearError) {
  Result r = run_cli({"place", "--counts", kCounts, "--trace", kCounts});
  EXPECT_EQ(r.code, 2);
  r = run_cli({"place", "--solver", "greedy"});
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(has(r.err, "greedy")) << r.err;
  r = run_cli({"place", "--trace", kCounts});  // a counts file is not a trace
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(has(r.err, "counts_2x2.json")) << r.err;
  r = run_cli({"place", "--locality", "1.5"});
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(has(r.err, "--locality")) << r.err;
  r = run_cli({"place", "--samples", "8", "--cluster", "netmoe-a800-2x8"});
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(has(r.err, "8 samples cannot fill the 16 devices")) << r.err;
}

}  // namespace
}  // namespace moecomm::cli
