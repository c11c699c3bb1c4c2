// The chain a new user runs: `mpirun -np 2 moecomm train` writes a routing trace, and
// `moecomm place --trace` and `mpirun moecomm infer --trace` read it with no other flag,
// taking the model's shape and the ranks' layout from the trace and saying so.
#include <gtest/gtest.h>

#include <unistd.h>

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "support/cli_runner.h"
#include "testbed/host_command.h"

namespace moecomm::cli {
namespace {

using testing::has;
using testing::Result;
using testing::run_cli;

// `mpirun -np N moecomm ARGS...`, as a user runs it.
testbed::CommandResult mpirun(int np, std::vector<std::string> args) {
  args.insert(args.begin(), {testbed::find_program("mpirun"), "--oversubscribe", "-np",
                             std::to_string(np), MOECOMM_BINARY});
  testbed::CommandOptions options;
  options.timeout_s = 120;
  options.env = {{"OMPI_ALLOW_RUN_AS_ROOT", "1"}, {"OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1"}};
  return testbed::run_command(args, options);
}

size_t count(const std::string& text, const std::string& part) {
  size_t n = 0;
  for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
  return n;
}

class TrainChain : public ::testing::Test {
 protected:
  // One trace for the whole suite: tiny model (hidden 64, fp32 rows, 4 experts, top-2,
  // 2 layers), 2 ranks on 2 nodes, 4 steps of 4 x 8 tokens per rank.
  static void SetUpTestSuite() {
    if (testbed::find_program("mpirun").empty()) return;
    const testbed::CommandResult r =
        mpirun(2, {"train", "--steps", "4", "--seq-len", "8", "--ranks-per-node", "1",
                   "--routing-trace", trace_});
    train_ = r;
  }

  void SetUp() override {
    if (testbed::find_program("mpirun").empty()) GTEST_SKIP() << "needs mpirun";
    ASSERT_EQ(train_.status, 0) << train_.out << train_.err;
  }

  // ctest runs each test in a process of its own, maybe at once: one file per process.
  static inline const std::string trace_ =
      ::testing::TempDir() + "/chain-routing-trace-" + std::to_string(getpid()) + ".json";
  static inline testbed::CommandResult train_;
};

TEST_F(TrainChain, TrainSaysWhatTheTraceHolds) {
  EXPECT_TRUE(has(train_.out, "wrote the routing trace " + trace_ +
                                  " with the model's shape and the ranks' layout"))
      << train_.out;
}

TEST_F(TrainChain, PlaceUsesTheTracesModelAndLayout) {
  Result r = run_cli({"place", "--trace", trace_, "--json"});
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["model"], "tiny");
  EXPECT_EQ(j["model_from"], "trace");
  EXPECT_EQ(j["bytes_per_token"], 256);  // hidden 64 x 4 bytes (the default model's: 3072)
  EXPECT_EQ(j["layout_from"], "trace");
  EXPECT_EQ(j["nodes"], 2);
  EXPECT_EQ(j["devices_per_node"], 1);
  EXPECT_EQ(j["samples"], 8);  // 4 sequences per rank x 2 ranks
  EXPECT_EQ(j["tokens"], 8);
  EXPECT_EQ(j["experts"], 4);
  EXPECT_EQ(j["top_k"], 2);
  EXPECT_EQ(j["layers"], 2);
  EXPECT_EQ(j["iterations"], 4);
  const auto& s = j["summary"];
  for (const char* level : {"inter_node", "intra_node"}) {
    for (const char* when : {"before", "after", "oracle"}) {
      EXPECT_DOUBLE_EQ(s[std::string(level) + "_MB"][when].get<double>(),
                       s[std::string(level) + "_tokens"][when].get<double>() * 256 / 1e6)
          << level << " " << when;
    }
  }
  // 8 samples x 8 tokens x top-2 per layer, a gather and a scatter per pair: 256 routed tokens,
  // half of them to the other node's experts on average; some cross nodes.
  EXPECT_GT(s["inter_node_tokens"]["before"].get<double>(), 0);
  Result table = run_cli({"place", "--trace", trace_});
  ASSERT_EQ(table.code, 0) << table.err;
  EXPECT_TRUE(has(table.out, "model shape from the trace " + trace_ +
                                 ": tiny, hidden 64 x 4 bytes = 256 bytes per token"))
      << table.out;
  EXPECT_TRUE(has(table.out, "layout from the trace " + trace_ + ": 2 nodes x 1 device"))
      << table.out;
}

TEST_F(TrainChain, InferOnMoreRanksUsesTheTracesModelAndCapsThePathLength) {
  const testbed::CommandResult r = mpirun(4, {"infer", "--trace", trace_});
  ASSERT_EQ(r.status, 0) << r.out << r.err;
  for (const std::string& part :
       {"model shape from the trace " + trace_ +
            ": tiny, hidden 64, ffn 128 (gelu), 4 experts, top-2 (--model overrides)",
        std::string("path length 1 (the default 3, capped at the 2 layers - 1)"),
        "layout: all 4 ranks on one node (the default: the trace " + trace_ +
            " was recorded on 2 ranks, 1 per node; pass --ranks-per-node)"}) {
    EXPECT_EQ(count(r.out, part), 1u) << part << "\n" << r.out;
  }
}

TEST_F(TrainChain, InferOnTheTracesRanksTakesItsLayout) {
  const testbed::CommandResult r = mpirun(2, {"infer", "--trace", trace_, "--json"});
  ASSERT_EQ(r.status, 0) << r.out << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["model"]["name"], "tiny");
  EXPECT_EQ(j["model"]["hidden"], 64);
  EXPECT_EQ(j["model"]["ffn_hidden"], 128);
  EXPECT_EQ(j["model"]["experts"], 4);
  EXPECT_EQ(j["model_from"], "trace");
  EXPECT_EQ(j["path_length"], 1);
  EXPECT_EQ(j["ranks_per_node"], 1);
  EXPECT_EQ(j["layout_from"], "trace");
}

// Bad input under mpirun: one message (rank 0's), a non-zero exit, no MPI_Abort banner.
TEST_F(TrainChain, InferInputErrorsPrintOnceAndExitCleanly) {
  testbed::CommandResult r = mpirun(4, {"infer", "--trace", trace_, "--path-length", "3"});
  EXPECT_NE(r.status, 0);
  const std::string all = r.out + r.err;
  EXPECT_EQ(count(all, "error: --path-length: 3 must be at most the layers - 1 = 1"), 1u) << all;
  EXPECT_EQ(count(all, "error:"), 1u) << all;
  EXPECT_FALSE(has(all, "MPI_ABORT")) << all;
  r = mpirun(3, {"infer", "--trace", trace_});
  EXPECT_NE(r.status, 0);
  EXPECT_EQ(count(r.out + r.err,
                  "error: " + trace_ + ": experts: 4 experts must be a multiple of the 3 ranks"),
            1u)
      << r.out << r.err;
  EXPECT_FALSE(has(r.out + r.err, "MPI_ABORT")) << r.out << r.err;
}

}  // namespace
}  // namespace moecomm::cli
