// The command line as a whole: --help shows every option's default, and under mpirun it is
// printed once.
#include "cli/app.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "support/cli_runner.h"
#include "testbed/host_command.h"

namespace moecomm::cli {
namespace {

using testing::has;
using testing::Result;
using testing::run_cli;

// Sets an environment variable for one test and restores it.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    setenv(name, value, 1);
  }
  ~ScopedEnv() {
    if (old_.empty())
      unsetenv(name_);
    else
      setenv(name_, old_.c_str(), 1);
  }

 private:
  const char* name_;
  std::string old_;
};

TEST(App, HelpShowsEveryOptionsDefault) {
  struct Case {
    std::vector<std::string> args;
    std::vector<std::string> shown;
  };
  const std::vector<Case> cases = {
      {{"plan", "--help"},
       {"--recompute TEXT:{none,selective,full}=selective", "--zero INT:INT in [0 - 3]=1",
        "--layers INT:INT in [1 - 64]=1", "--budget-s FLOAT:FLOAT in [0 - 86400]=0.8"}},
      {{"sim", "--help"},
       {"--strategy TEXT=baseline", "--completion-tolerance FLOAT:FLOAT in [0 - 0.1]=0.005",
        "--routing TEXT:{auto,uniform,synthetic}=auto", "--locality FLOAT:FLOAT in [0 - 1]=0.9"}},
      {{"place", "--help"},
       {"--solver TEXT:{flow,km,ilp,lemon-ns,lemon-cs,lemon-cap}=flow",
        "--layers INT:INT in [2 - 4096]=12", "--skew FLOAT:FLOAT in [0 - 10]=1"}},
      {{"train", "--help"},
       {"--steps INT:INT in [1 - 1000000]=200", "--a2a TEXT:{flat,1dh,2dh,pairwise,dedup}=flat"}},
      // The path length's default depends on the trace: its description states it.
      {{"infer", "--help"},
       {"--path-length INT:INT in [1 - 4096]\n", "default 3, or the layers - 1 when fewer"}},
      {{"profile", "--help"}, {"--iters INT:INT in [1 - 100000]=20", "--max-bytes TEXT=16MiB"}},
      {{"bench", "--help"}, {"--steps INT:INT in [1 - 10000]=5", "--model TEXT=testbed-moe-s"}},
      {{"testbed", "up", "--help"}, {"--datacenters INT=1"}},
  };
  for (const Case& c : cases) {
    const Result r = run_cli(c.args);
    ASSERT_EQ(r.code, 0) << c.args[0] << ": " << r.err;
    for (const std::string& s : c.shown) {
      EXPECT_TRUE(has(r.out, s)) << c.args[0] << " --help lacks " << s << ":\n" << r.out;
    }
  }
}

// A default that only stands for one the description names ("the model's") is not shown as
// the placeholder the variable holds, nor is a required option's.
TEST(App, HelpShowsNoPlaceholderDefaults) {
  for (const char* command : {"plan", "sim"}) {
    const Result r = run_cli({command, "--help"});
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_TRUE(has(r.out, "--seq-len INT:INT in [1 - 100000000]\n")) << r.out;
    EXPECT_FALSE(has(r.out, "=0 ") || has(r.out, "=0\n")) << r.out;
    EXPECT_TRUE(has(r.out, "override the model's sequence length (")) << r.out;
    EXPECT_TRUE(has(r.out, "default: the model's)")) << r.out;
  }
  Result r = run_cli({"sim", "--help"});
  EXPECT_TRUE(has(r.out, "--compute-efficiency FLOAT:FLOAT in [0.01 - 1]\n")) << r.out;
  r = run_cli({"bench", "--help"});
  EXPECT_TRUE(has(r.out, "--strategy TEXT ...")) << r.out;
  EXPECT_FALSE(has(r.out, "=[]")) << r.out;
  r = run_cli({"testbed", "up", "--help"});
  EXPECT_TRUE(has(r.out, "--nodes INT REQUIRED")) << r.out;
}

// One name per setting: `train --gate` spells the gates as moecomm.torch does, and the expert
// FFN is --ffn-type gelu|swiglu as in model files; other spellings are refused with a hint.
TEST(App, TrainRefusesOtherSpellingsOfGateAndFfnType) {
  const Result help = run_cli({"train", "--help"});
  EXPECT_TRUE(has(help.out, "--gate TEXT:{gshard,sigmoid,xmoe,expert-choice}=gshard")) << help.out;
  EXPECT_TRUE(has(help.out, "--ffn-type TEXT:{gelu,swiglu}")) << help.out;
  EXPECT_TRUE(has(help.out, "Renamed:\n  --expert TEXT")) << help.out;
  struct Case {
    std::vector<std::string> args;
    std::string error;
  };
  const std::vector<Case> cases = {
      {{"--gate", "expert_choice"},
       "error: --gate: must be one of gshard, sigmoid, xmoe, expert-choice, got "
       "'expert_choice'; did you mean 'expert-choice'?\n"},
      {{"--ffn-type", "swigl"},
       "error: --ffn-type: must be \"gelu\" or \"swiglu\", got \"swigl\"; did you mean "
       "'swiglu'?\n"},
      {{"--expert", "mixtral"},
       "error: --expert: renamed --ffn-type; did you mean "
       "--ffn-type swiglu?\n"},
      {{"--expert", "gpt"}, "did you mean --ffn-type gelu?\n"},
  };
  for (const Case& c : cases) {
    std::vector<std::string> args = {"train"};
    args.insert(args.end(), c.args.begin(), c.args.end());
    const Result r = run_cli(args);
    EXPECT_EQ(r.code, 2) << c.args[1];
    EXPECT_TRUE(has(r.err, c.error)) << r.err;
  }
}

// mpirun starts one process per rank, all parsing the same arguments before MPI starts; the
// launcher's rank variable says which one prints.
TEST(App, HelpAndVersionComeFromRankZeroOnly) {
  {
    ScopedEnv rank("OMPI_COMM_WORLD_RANK", "1");
    for (const std::vector<std::string>& args :
         std::vector<std::vector<std::string>>{{"--help"}, {"train", "--help"}, {"--version"}}) {
      const Result r = run_cli(args);
      EXPECT_EQ(r.code, 0) << args[0];
      EXPECT_EQ(r.out, "") << args[0];
      EXPECT_EQ(r.err, "") << args[0];
    }
  }
  {
    ScopedEnv rank("PMI_RANK", "0");
    const Result r = run_cli({"--version"});
    EXPECT_EQ(r.out, "moecomm 0.1.0\n");
  }
  if (testbed::find_program("mpirun").empty()) GTEST_SKIP() << "needs mpirun";
  testbed::CommandOptions options;
  options.timeout_s = 60;
  options.env = {{"OMPI_ALLOW_RUN_AS_ROOT", "1"}, {"OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1"}};
  const testbed::CommandResult r = testbed::run_command(
      {"mpirun", "--oversubscribe", "-np", "3", MOECOMM_BINARY, "train", "--help"}, options);
  ASSERT_EQ(r.status, 0) << r.out << r.err;
  size_t usages = 0;
  for (size_t at = r.out.find("Usage:"); at != std::string::npos; at = r.out.find("Usage:", at + 1))
    ++usages;
  EXPECT_EQ(usages, 1u) << r.out;
}

}  // namespace
}  // namespace moecomm::cli
