#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "support/cli_runner.h"
#include "testbed/host_checks.h"
#include "testbed/host_command.h"

namespace moecomm::cli {
namespace {

using testbed::CommandResult;
using testing::has;
using testing::Result;
using testing::run_cli;

// The moecomm binary, as a user runs it (mpirun's output goes to the process's stdout).
CommandResult moecomm(std::vector<std::string> args, double timeout_s = 60) {
  args.insert(args.begin(), MOECOMM_BINARY);
  testbed::CommandOptions options;
  options.timeout_s = timeout_s;
  return testbed::run_command(args, options);
}

std::vector<std::string> namespaces_named(const std::string& prefix) {
  const CommandResult r = testbed::run_command({"ip", "netns", "list"});
  std::vector<std::string> found;
  std::istringstream lines(r.out);
  std::string name;
  while (lines >> name) {
    if (name.rfind(prefix, 0) == 0) found.push_back(name);
    std::getline(lines, name);  // skip "(id: N)"
  }
  return found;
}

// Why the integration tests cannot run here, or "" when they can.
std::string why_not_here() {
  if (!testbed::has_network_privileges()) return "needs root (CAP_NET_ADMIN, CAP_SYS_ADMIN)";
  for (const char* program : {"ip", "tc", "unshare", "mpirun"}) {
    if (testbed::find_program(program).empty()) return std::string("needs ") + program;
  }
  const std::string probe = "moecomm-probe-" + std::to_string(getpid());
  const CommandResult r = testbed::run_command({"ip", "netns", "add", probe});
  if (r.status != 0) return "network namespaces are not allowed here: " + r.err;
  testbed::run_command({"ip", "netns", "del", probe});
  return "";
}

// Each test gets a testbed name and a state directory of its own.
class TestbedCli : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string why = why_not_here();
    if (!why.empty()) GTEST_SKIP() << "testbed integration test skipped: " << why;
    name_ += "t";  // appended: assigning trips GCC 12 -O3 -Wrestrict
    name_ += std::to_string(getpid());
    dir_ = ::testing::TempDir() + "/testbed-" + name_;
    setenv("MOECOMM_TESTBED_DIR", dir_.c_str(), 1);
  }
  void TearDown() override {
    if (name_.empty()) return;
    moecomm({"testbed", "down", "--name", name_});
    unsetenv("MOECOMM_TESTBED_DIR");
    std::filesystem::remove_all(dir_);
  }
  std::string prefix() const { return "mctb-" + name_ + "-"; }

  // Brings up 2 nodes x 2 ranks at 100 Mbit/s.
  bool up() {
    const CommandResult r = moecomm({"testbed", "up", "--name", name_, "--nodes", "2",
                                     "--ranks-per-node", "2", "--node-link", "100mbit"});
    EXPECT_EQ(r.status, 0) << r.err;
    return r.status == 0;
  }

  std::string name_, dir_;
};

// Sends `bytes` from one namespace to another over TCP and returns the Mbit/s the sender saw
// (connect to the receiver's acknowledgement), or a negative number when it failed. Each end
// is a child process that has joined its namespace.
double send_between(const std::string& from, const std::string& to, const std::string& to_addr,
                    std::size_t bytes) {
  int ready[2], report[2];
  if (pipe(ready) != 0 || pipe(report) != 0) return -1;
  auto join = [](const std::string& ns) {
    const int fd = open(("/run/netns/" + ns).c_str(), O_RDONLY);
    return fd >= 0 && setns(fd, CLONE_NEWNET) == 0;
  };
  const int port = 5201;
  const pid_t server = fork();
  if (server == 0) {
    alarm(20);
    if (!join(to)) _exit(1);
    const int s = socket(AF_INET, SOCK_STREAM, 0);
    const int one = 1;
    setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    if (bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || listen(s, 1) != 0) _exit(1);
    (void)!write(ready[1], "r", 1);
    const int c = accept(s, nullptr, nullptr);
    std::vector<char> buf(1 << 16);
    std::size_t got = 0;
    for (ssize_t n; (n = read(c, buf.data(), buf.size())) > 0;) got += n;
    (void)!write(c, "k", 1);
    _exit(got == bytes ? 0 : 1);
  }
  const pid_t client = fork();
  if (client == 0) {
    alarm(20);
    char r;
    if (read(ready[0], &r, 1) != 1 || !join(from)) _exit(1);
    const int s = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    inet_pton(AF_INET, to_addr.c_str(), &a.sin_addr);
    const auto start = std::chrono::steady_clock::now();
    if (connect(s, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) _exit(1);
    std::vector<char> buf(1 << 16, 'x');
    for (std::size_t sent = 0; sent < bytes;) {
      const ssize_t n = write(s, buf.data(), std::min(buf.size(), bytes - sent));
      if (n <= 0) _exit(1);
      sent += n;
    }
    shutdown(s, SHUT_WR);
    if (read(s, &r, 1) != 1) _exit(1);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const double mbit = bytes * 8 / seconds / 1e6;
    (void)!write(report[1], &mbit, sizeof mbit);
    _exit(0);
  }
  int s1 = 0, s2 = 0;
  waitpid(client, &s1, 0);
  waitpid(server, &s2, 0);
  double mbit = -1;
  if (s1 == 0 && s2 == 0 && read(report[0], &mbit, sizeof mbit) != sizeof mbit) mbit = -1;
  for (int fd : {ready[0], ready[1], report[0], report[1]}) close(fd);
  return s1 == 0 && s2 == 0 ? mbit : -1;
}

std::map<std::string, int> line_counts(const std::string& text) {
  std::map<std::string, int> counts;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) ++counts[line];
  return counts;
}

TEST_F(TestbedCli, UpRunDown) {
  if (!up()) return;
  // Refuses a second testbed of the same name.
  CommandResult again = moecomm({"testbed", "up", "--name", name_, "--nodes", "2",
                                 "--ranks-per-node", "2", "--node-link", "100mbit"});
  EXPECT_EQ(again.status, 2);
  EXPECT_TRUE(has(again.err, "already exists")) << again.err;
  EXPECT_TRUE(has(again.err, "testbed down --name " + name_)) << again.err;

  CommandResult status = moecomm({"testbed", "status", "--name", name_, "--json"});
  ASSERT_EQ(status.status, 0) << status.err;
  const auto j = nlohmann::json::parse(status.out);
  EXPECT_EQ(j["healthy"], true);
  EXPECT_EQ(j["namespaces"].size(), 3u);

  // Two nodes, each with its own host name, two ranks each, in order.
  CommandResult r = moecomm({"testbed", "run", "--name", name_, "--", "hostname"});
  ASSERT_EQ(r.status, 0) << r.err;
  const std::map<std::string, int> hosts = {{"node0", 2}, {"node1", 2}};
  EXPECT_EQ(line_counts(r.out), hosts) << r.out;
  r = moecomm({"testbed", "run", "--name", name_, "--", "sh", "-c",
               "echo $OMPI_COMM_WORLD_RANK $(hostname) $MOECOMM_TESTBED_NODE_LINK_BPS "
               "$MOECOMM_TESTBED_RANKS_PER_NODE"});
  ASSERT_EQ(r.status, 0) << r.err;
  const std::map<std::string, int> ranks = {{"0 node0 12500000 2", 1},
                                            {"1 node0 12500000 2", 1},
                                            {"2 node1 12500000 2", 1},
                                            {"3 node1 12500000 2", 1}};
  EXPECT_EQ(line_counts(r.out), ranks) << r.out;

  // The command's status comes back.
  r = moecomm({"testbed", "run", "--name", name_, "--np", "2", "--", "sh", "-c", "exit 3"});
  EXPECT_EQ(r.status, 3) << r.err;

  // A command past its time limit is stopped, with everything it started.
  r = moecomm({"testbed", "run", "--name", name_, "--timeout", "1", "--", "sleep", "30"});
  EXPECT_EQ(r.status, 2);
  EXPECT_TRUE(has(r.err, "`sleep 30` did not finish within 1 s")) << r.err;
  for (const std::string& ns : namespaces_named(prefix())) {
    EXPECT_EQ(testbed::run_command({"ip", "netns", "pids", ns}).out, "") << ns;
  }

  // The shaped link limits throughput (printed, not asserted: timing is the machine's).
  const double mbit = send_between(prefix() + "n0", prefix() + "n1", "10.213.0.2", 2000000);
  EXPECT_GT(mbit, 0) << "the 2 MB transfer between the nodes failed";
  std::printf("[testbed] 2 MB from node0 to node1 over a 100mbit link: %.1f Mbit/s\n", mbit);

  // down kills what runs inside, removes every namespace and the state, and may be repeated.
  const pid_t sleeper = fork();
  if (sleeper == 0) {
    execlp("ip", "ip", "netns", "exec", (prefix() + "n1").c_str(), "sleep", "300", nullptr);
    _exit(127);
  }
  for (int i = 0;
       i < 100 && testbed::run_command({"ip", "netns", "pids", prefix() + "n1"}).out.empty(); ++i) {
    usleep(20000);
  }
  r = moecomm({"testbed", "down", "--name", name_});
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(has(r.out, "is down: deleted 3 namespaces, killed")) << r.out;
  int wstatus = 0;
  ASSERT_EQ(waitpid(sleeper, &wstatus, 0), sleeper);
  EXPECT_TRUE(WIFSIGNALED(wstatus) && WTERMSIG(wstatus) == SIGKILL);
  EXPECT_EQ(namespaces_named(prefix()), std::vector<std::string>{});
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/" + name_));
  r = moecomm({"testbed", "down", "--name", name_});
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(has(r.out, "nothing to take down")) << r.out;
  r = moecomm({"testbed", "status", "--name", name_});
  EXPECT_EQ(r.status, 2);
  EXPECT_TRUE(has(r.err, "is not up")) << r.err;
}

TEST_F(TestbedCli, FailedUpLeavesNothingAndDownCleansLeftovers) {
  // A latency needs netem; where the kernel lacks it, up fails and removes what it made.
  CommandResult r = moecomm({"testbed", "up", "--name", name_, "--nodes", "2", "--ranks-per-node",
                             "1", "--node-link", "100mbit,5ms"});
  if (r.status == 0) {
    std::printf("[testbed] this kernel has netem: the latency testbed came up\n");
  } else {
    EXPECT_EQ(r.status, 2);
    EXPECT_TRUE(has(r.err, "latency needs the netem qdisc (CONFIG_NET_SCH_NETEM)")) << r.err;
    EXPECT_TRUE(has(r.err, "give the rate alone")) << r.err;
    EXPECT_EQ(namespaces_named(prefix()), std::vector<std::string>{});
    EXPECT_FALSE(std::filesystem::exists(dir_ + "/" + name_));
  }
  moecomm({"testbed", "down", "--name", name_});
  // Leftovers of a testbed whose state is gone (a half-made up): down finds them by name.
  ASSERT_EQ(testbed::run_command({"ip", "netns", "add", prefix() + "n7"}).status, 0);
  ASSERT_EQ(testbed::run_command({"ip", "netns", "add", prefix() + "fab"}).status, 0);
  r = moecomm({"testbed", "up", "--name", name_, "--nodes", "2", "--ranks-per-node", "1",
               "--node-link", "100mbit"});
  EXPECT_EQ(r.status, 2);
  EXPECT_TRUE(has(r.err, "already exists")) << r.err;
  r = moecomm({"testbed", "down", "--name", name_});
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(has(r.out, "deleted 2 namespaces")) << r.out;
  EXPECT_EQ(namespaces_named(prefix()), std::vector<std::string>{});
}

// Bad flags are refused before anything is made (no root needed).
TEST(TestbedCliFlags, BadValuesNameTheFlag) {
  Result r = run_cli({"testbed", "up", "--nodes", "3", "--ranks-per-node", "1", "--node-link",
                      "1gbit", "--datacenters", "2", "--dc-link", "1gbit"});
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(has(r.err, "--datacenters")) << r.err;
  r = run_cli({"testbed", "up", "--nodes", "2", "--ranks-per-node", "1", "--node-link", "200mbps"});
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(has(r.err, "--node-link")) << r.err;
  EXPECT_TRUE(has(r.err, "ambiguous")) << r.err;
  r = run_cli({"testbed", "up", "--nodes", "0", "--ranks-per-node", "1", "--node-link", "1gbit"});
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(has(r.err, "--nodes")) << r.err;
  r = run_cli({"testbed", "up", "--nodes", "2", "--ranks-per-node", "1"});
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(has(r.err, "--node-link")) << r.err;
  r = run_cli({"testbed", "up", "--name", "a/b", "--nodes", "2", "--ranks-per-node", "1",
               "--node-link", "1gbit"});
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(has(r.err, "--name")) << r.err;
  r = run_cli({"testbed", "run", "--name", "moecomm-test-none"});
  EXPECT_EQ(r.code, 2);
  r = run_cli({"testbed"});
  EXPECT_EQ(r.code, 2);
  r = run_cli({"testbed", "--help"});
  EXPECT_EQ(r.code, 0);
  for (const char* sub : {"up", "run", "down", "status"}) EXPECT_TRUE(has(r.out, sub)) << sub;
}

}  // namespace
}  // namespace moecomm::cli
