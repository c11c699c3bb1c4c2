#include "testbed/host_command.h"

#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <fstream>
#include <sstream>
#include <thread>

#include "support/expect_error.h"

namespace moecomm::testbed {
namespace {

// Whether `pid` has finished: gone, or a zombie waiting for a parent that is not us.
bool finished(int pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text;
  if (!std::getline(stat, text)) return true;
  const std::size_t close = text.rfind(')');
  return close != std::string::npos && close + 2 < text.size() && text[close + 2] == 'Z';
}

TEST(TestbedHostCommand, CapturesOutputAndStatus) {
  const CommandResult r = run_command({"sh", "-c", "echo out; echo err >&2; exit 3"});
  EXPECT_EQ(r.status, 3);
  EXPECT_EQ(r.out, "out\n");
  EXPECT_EQ(r.err, "err\n");
  EXPECT_FALSE(r.timed_out);
  EXPECT_EQ(run_command({"true"}).status, 0);
}

TEST(TestbedHostCommand, ASignalIs128PlusItsNumber) {
  EXPECT_EQ(run_command({"sh", "-c", "kill -TERM $$"}).status, 128 + SIGTERM);
}

TEST(TestbedHostCommand, StreamsWhenAskedAndSetsTheEnvironment) {
  std::ostringstream out, err;
  CommandOptions options;
  options.out = &out;
  options.err = &err;
  options.env = {{"MOECOMM_TB_TEST", "42"}, {"PATH", std::getenv("PATH")}};
  const CommandResult r =
      run_command({"sh", "-c", "echo $MOECOMM_TB_TEST; echo e >&2; cat"}, options);
  EXPECT_EQ(r.status, 0);
  EXPECT_EQ(out.str(), "42\n");  // stdin is /dev/null: cat ends at once
  EXPECT_EQ(err.str(), "e\n");
  EXPECT_EQ(r.out, "");
}

TEST(TestbedHostCommand, MissingProgramIsAnError) {
  EXPECT_ERROR_HAS(run_command({"moecomm-no-such-program"}), "moecomm-no-such-program",
                   "not found");
  EXPECT_EQ(find_program("moecomm-no-such-program"), "");
  EXPECT_NE(find_program("sh"), "");
  EXPECT_ERROR_HAS(run_command({"/etc/passwd"}), "/etc/passwd");  // not executable
}

TEST(TestbedHostCommand, TimeLimitKillsTheWholeTree) {
  CommandOptions options;
  options.timeout_s = 0.3;
  // The shell starts a grandchild that ignores SIGTERM and prints its pid; both must die.
  const CommandResult r =
      run_command({"sh", "-c", "sh -c 'trap \"\" TERM; sleep 30' & echo $!; sleep 30"}, options);
  EXPECT_TRUE(r.timed_out);
  const int grandchild = std::stoi(r.out);
  bool gone = false;
  for (int i = 0; i < 100 && !gone; ++i) {  // init reaps it once killed
    gone = finished(grandchild);
    if (!gone) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_TRUE(gone) << "process " << grandchild << " outlived the time limit";
}

TEST(TestbedHostCommand, ShellQuoting) {
  EXPECT_EQ(shell_quote({"ip", "netns", "add", "mctb-a-n0"}), "ip netns add mctb-a-n0");
  EXPECT_EQ(shell_quote({"sh", "-c", "echo $x", "it's", ""}), "sh -c 'echo $x' 'it'\\''s' ''");
}

}  // namespace
}  // namespace moecomm::testbed
