#include "testbed/launch_files.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

namespace moecomm::testbed {
namespace {

TestbedSpec spec_of(int nodes, int ranks, int datacenters) {
  TestbedSpec spec{.name = "t"};  // constructed: assigning trips GCC 12 -O3 -Wrestrict
  spec.nodes = nodes;
  spec.ranks_per_node = ranks;
  spec.datacenters = datacenters;
  spec.node_link = parse_link("100mbit", "--node-link");
  if (datacenters > 1) spec.dc_link = parse_link("25MBps", "--dc-link");
  spec.validate();
  return spec;
}

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST(TestbedLaunchFiles, HostfileListsNodeAddressesWithTheirSlots) {
  EXPECT_EQ(hostfile_text(spec_of(2, 2, 1)),
            "# moecomm testbed t: one line per emulated node\n"
            "10.213.0.1 slots=2\n"
            "10.213.0.2 slots=2\n");
}

TEST(TestbedLaunchFiles, AgentMapsAddressesAndHostNamesToNamespaces) {
  const std::string agent = agent_script(spec_of(2, 2, 1));
  EXPECT_EQ(agent.rfind("#!/bin/sh\n", 0), 0u);
  EXPECT_TRUE(has(agent, "  10.213.0.1|node0) ns=mctb-t-n0 node=node0 ;;\n")) << agent;
  EXPECT_TRUE(has(agent, "  10.213.0.2|node1) ns=mctb-t-n1 node=node1 ;;\n")) << agent;
  EXPECT_TRUE(has(agent, "exit 255")) << agent;
  EXPECT_TRUE(has(agent,
                  "exec ip netns exec \"$ns\" unshare --uts sh -c 'hostname \"$0\" && exec sh "
                  "-c \"$*\"' \"$node\" \"$@\"\n"))
      << agent;
}

TEST(TestbedLaunchFiles, MpirunStartsInNodeZeroWithTheLayoutInTheEnvironment) {
  const TestbedSpec spec = spec_of(4, 3, 2);
  const std::vector<std::string> argv =
      mpirun_command(spec, {"/s/hostfile", "/s/agent.sh", "/usr/bin/mpirun"}, 12,
                     {"moecomm", "train", "--steps", "3"});
  const std::vector<std::string> head = {"ip",
                                         "netns",
                                         "exec",
                                         "mctb-t-n0",
                                         "unshare",
                                         "--uts",
                                         "sh",
                                         "-c",
                                         "hostname \"$0\" && exec \"$@\"",
                                         "node0",
                                         "/usr/bin/mpirun",
                                         "--hostfile",
                                         "/s/hostfile",
                                         "-np",
                                         "12"};
  ASSERT_GT(argv.size(), head.size());
  EXPECT_EQ(std::vector<std::string>(argv.begin(), argv.begin() + head.size()), head);
  auto follows = [&](const std::string& a, const std::string& b) {
    for (std::size_t i = 0; i + 1 < argv.size(); ++i) {
      if (argv[i] == a && argv[i + 1] == b) return true;
    }
    return false;
  };
  EXPECT_TRUE(follows("--map-by", "slot"));
  EXPECT_TRUE(follows("--bind-to", "none"));
  EXPECT_TRUE(follows("plm_rsh_agent", "/s/agent.sh"));
  EXPECT_TRUE(follows("btl", "self,vader,tcp"));
  EXPECT_TRUE(follows("btl_tcp_if_include", "10.213.0.0/16"));
  EXPECT_TRUE(follows("mpi_yield_when_idle", "1"));
  EXPECT_TRUE(follows("btl_tcp_rcvbuf", "16384"));
  if (!std::getenv("OPENBLAS_NUM_THREADS")) {
    EXPECT_TRUE(follows("-x", "OPENBLAS_NUM_THREADS=1"));
  }
  if (!std::getenv("MOECOMM_COMM_THREAD_NICE")) {
    EXPECT_TRUE(follows("-x", "MOECOMM_COMM_THREAD_NICE=-10"));
  }
  EXPECT_TRUE(follows("oob_tcp_if_include", "10.213.0.0/16"));
  EXPECT_TRUE(follows("orte_leave_session_attached", "1"));
  EXPECT_NE(std::find(argv.begin(), argv.end(), "--oversubscribe"), argv.end());
  for (const char* env :
       {"MOECOMM_TESTBED_NAME=t", "MOECOMM_TESTBED_NODES=4", "MOECOMM_TESTBED_RANKS_PER_NODE=3",
        "MOECOMM_TESTBED_DATACENTERS=2", "MOECOMM_TESTBED_NODE_LINK_BPS=12500000",
        "MOECOMM_TESTBED_DC_LINK_BPS=25000000", "MOECOMM_TESTBED_NODE_LINK_LATENCY_S=0"}) {
    EXPECT_TRUE(follows("-x", env)) << env;
  }
  const std::vector<std::string> tail = {"moecomm", "train", "--steps", "3"};
  EXPECT_EQ(std::vector<std::string>(argv.end() - 4, argv.end()), tail);
}

// A 50 Mbit/s tbf queues 100 ms = 625,000 bytes; the connections crossing one node's link
// (its ranks x the ranks elsewhere) share it, at twice their buffer each.
TEST(TestbedLaunchFiles, TcpWindowsTogetherFitTheLinkQueue) {
  TestbedSpec spec = spec_of(4, 4, 1);
  spec.node_link = parse_link("50mbit", "--node-link");
  EXPECT_EQ(tcp_receive_buffer_bytes(spec), 625000 / (2 * 4 * 12));
  spec.nodes = 2;  // 625000 / 32 is above the cap
  EXPECT_EQ(tcp_receive_buffer_bytes(spec), 16384);
  spec.nodes = 16;  // below the floor
  EXPECT_EQ(tcp_receive_buffer_bytes(spec), 4096);
  spec.nodes = 4;
  spec.datacenters = 2;  // 2 x 4 ranks on each side of a 6.5 MB/s link (queue 650,000 bytes)
  spec.dc_link = parse_link("52mbit", "--dc-link");
  EXPECT_EQ(tcp_receive_buffer_bytes(spec), 650000 / (2 * 8 * 8));
}

TEST(TestbedLaunchFiles, OneDatacenterHasNoDcLink) {
  std::map<std::string, std::string> env;
  for (const auto& [name, value] : layout_environment(spec_of(2, 1, 1))) env[name] = value;
  EXPECT_EQ(env["MOECOMM_TESTBED_DC_LINK_BPS"], "0");
  EXPECT_EQ(env["MOECOMM_TESTBED_DATACENTERS"], "1");
  EXPECT_EQ(env.size(), 8u);
}

}  // namespace
}  // namespace moecomm::testbed
