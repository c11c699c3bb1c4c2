#include "testbed/setup_commands.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace moecomm::testbed {
namespace {

std::string joined(const Argv& argv) {
  std::string line;
  for (const std::string& word : argv) line += (line.empty() ? "" : " ") + word;
  return line;
}

std::vector<std::string> lines(const std::vector<SetupStep>& steps) {
  std::vector<std::string> out;
  for (const SetupStep& step : steps) out.push_back(joined(step.argv));
  return out;
}

TestbedSpec two_by_two() {
  TestbedSpec spec{.name = "t"};  // constructed: assigning trips GCC 12 -O3 -Wrestrict
  spec.nodes = 2;
  spec.ranks_per_node = 2;
  spec.node_link = parse_link("100mbit", "--node-link");
  return spec;
}

TEST(TestbedSetupCommands, TbfBucketAndQueueFollowTheRate) {
  // 100 Mbit/s = 12.5 MB/s: 4 ms = 50000 bytes of bucket, 100 ms = 1.25 MB of queue.
  EXPECT_EQ(tbf_params(12.5e6).burst_bytes, 50000);
  EXPECT_EQ(tbf_params(12.5e6).limit_bytes, 1300000);
  // 1 Gbit/s.
  EXPECT_EQ(tbf_params(125e6).burst_bytes, 500000);
  EXPECT_EQ(tbf_params(125e6).limit_bytes, 13000000);
  // 500 kbit/s: the floors (16 KiB of bucket, 32 KiB of queue) hold.
  EXPECT_EQ(tbf_params(62500).burst_bytes, 16384);
  EXPECT_EQ(tbf_params(62500).limit_bytes, 16384 + 32768);
}

TEST(TestbedSetupCommands, TwoNodesOfTwoRanks) {
  const std::vector<SetupStep> steps = up_steps(two_by_two());
  const std::string tbf = "tbf rate 100000000bit burst 50000 limit 1300000";
  const std::vector<std::string> expected = {
      "ip netns add mctb-t-fab",
      "ip -n mctb-t-fab link set lo up",
      "tc -n mctb-t-fab qdisc add dev lo root tbf rate 8000000bit burst 16384 limit 49152",
      "tc -n mctb-t-fab qdisc del dev lo root",
      "ip -n mctb-t-fab link add br0 type bridge",
      "ip -n mctb-t-fab link set br0 up",
      "ip netns add mctb-t-n0",
      "ip -n mctb-t-n0 link set lo up",
      "ip -n mctb-t-fab link add n0 type veth peer name eth0 netns mctb-t-n0",
      "ip -n mctb-t-fab link set n0 master br0 up",
      "ip -n mctb-t-n0 addr add 10.213.0.1/16 dev eth0",
      "ip -n mctb-t-n0 link set eth0 up",
      "tc -n mctb-t-n0 qdisc add dev eth0 root " + tbf,
      "tc -n mctb-t-fab qdisc add dev n0 root " + tbf,
      "ip netns add mctb-t-n1",
      "ip -n mctb-t-n1 link set lo up",
      "ip -n mctb-t-fab link add n1 type veth peer name eth0 netns mctb-t-n1",
      "ip -n mctb-t-fab link set n1 master br0 up",
      "ip -n mctb-t-n1 addr add 10.213.0.2/16 dev eth0",
      "ip -n mctb-t-n1 link set eth0 up",
      "tc -n mctb-t-n1 qdisc add dev eth0 root " + tbf,
      "tc -n mctb-t-fab qdisc add dev n1 root " + tbf,
  };
  EXPECT_EQ(lines(steps), expected);
  // The steps whose failure means something beyond their own stderr.
  EXPECT_EQ(steps[0].check, Check::kNamespace);
  EXPECT_EQ(steps[2].check, Check::kTbf);
  EXPECT_EQ(steps[6].check, Check::kNamespace);
  EXPECT_EQ(steps[14].check, Check::kNamespace);
  EXPECT_EQ(steps[1].check, Check::kNone);
}

TEST(TestbedSetupCommands, FourNodesInTwoDatacenters) {
  TestbedSpec spec{.name = "dc"};  // constructed: assigning trips GCC 12 -O3 -Wrestrict
  spec.nodes = 4;
  spec.ranks_per_node = 1;
  spec.datacenters = 2;
  spec.node_link = parse_link("1gbit", "--node-link");
  spec.dc_link = parse_link("200mbit", "--dc-link");
  spec.validate();
  const std::string node_tbf = "tbf rate 1000000000bit burst 500000 limit 13000000";
  const std::string dc_tbf = "tbf rate 200000000bit burst 100000 limit 2600000";
  std::vector<std::string> expected = {
      "ip netns add mctb-dc-fab",
      "ip -n mctb-dc-fab link set lo up",
      "tc -n mctb-dc-fab qdisc add dev lo root tbf rate 8000000bit burst 16384 limit 49152",
      "tc -n mctb-dc-fab qdisc del dev lo root",
      "ip -n mctb-dc-fab link add br0 type bridge",
      "ip -n mctb-dc-fab link set br0 up",
      "ip -n mctb-dc-fab link add br1 type bridge",
      "ip -n mctb-dc-fab link set br1 up",
      "ip -n mctb-dc-fab link add brcore type bridge",
      "ip -n mctb-dc-fab link set brcore up",
      "ip -n mctb-dc-fab link add u0 type veth peer name c0",
      "ip -n mctb-dc-fab link set u0 master br0 up",
      "ip -n mctb-dc-fab link set c0 master brcore up",
      "tc -n mctb-dc-fab qdisc add dev u0 root " + dc_tbf,
      "tc -n mctb-dc-fab qdisc add dev c0 root " + dc_tbf,
      "ip -n mctb-dc-fab link add u1 type veth peer name c1",
      "ip -n mctb-dc-fab link set u1 master br1 up",
      "ip -n mctb-dc-fab link set c1 master brcore up",
      "tc -n mctb-dc-fab qdisc add dev u1 root " + dc_tbf,
      "tc -n mctb-dc-fab qdisc add dev c1 root " + dc_tbf,
  };
  for (int k = 0; k < 4; ++k) {
    const std::string n = std::to_string(k), ns = "mctb-dc-n" + n;
    const std::string br = k < 2 ? "br0" : "br1";  // nodes fill datacenters in order
    const std::vector<std::string> node = {
        "ip netns add " + ns,
        "ip -n " + ns + " link set lo up",
        "ip -n mctb-dc-fab link add n" + n + " type veth peer name eth0 netns " + ns,
        "ip -n mctb-dc-fab link set n" + n + " master " + br + " up",
        "ip -n " + ns + " addr add 10.213.0." + std::to_string(k + 1) + "/16 dev eth0",
        "ip -n " + ns + " link set eth0 up",
        "tc -n " + ns + " qdisc add dev eth0 root " + node_tbf,
        "tc -n mctb-dc-fab qdisc add dev n" + n + " root " + node_tbf,
    };
    expected.insert(expected.end(), node.begin(), node.end());
  }
  EXPECT_EQ(lines(up_steps(spec)), expected);
}

TEST(TestbedSetupCommands, LatencyUsesNetemHalfOnEachEndAfterProbingForIt) {
  TestbedSpec spec = two_by_two();
  spec.node_link = parse_link("1gbit,5ms", "--node-link");
  const std::vector<SetupStep> steps = up_steps(spec);
  ASSERT_GT(steps.size(), 6u);
  EXPECT_EQ(joined(steps[4].argv), "tc -n mctb-t-fab qdisc add dev lo root netem delay 1000us");
  EXPECT_EQ(steps[4].check, Check::kNetem);
  EXPECT_EQ(joined(steps[5].argv), "tc -n mctb-t-fab qdisc del dev lo root");
  // 2.5 ms each end; queue (2.5 + 100) ms at 125 MB/s = 8541.7 frames of 1500 bytes.
  EXPECT_EQ(joined(shaping_command("mctb-t-n0", "eth0", spec.node_link)),
            "tc -n mctb-t-n0 qdisc add dev eth0 root netem delay 2500us rate 1000000000bit "
            "limit 8542");
  EXPECT_EQ(joined(steps.back().argv),
            "tc -n mctb-t-fab qdisc add dev n1 root netem delay 2500us rate 1000000000bit "
            "limit 8542");
  EXPECT_EQ(netem_limit_packets(62500, 0.001), 1000);  // netem's default is the floor
}

TEST(TestbedSetupCommands, Teardown) {
  EXPECT_EQ(joined(list_namespaces_command()), "ip netns list");
  EXPECT_EQ(joined(namespace_pids_command("mctb-t-n0")), "ip netns pids mctb-t-n0");
  const std::vector<Argv> del = delete_namespace_commands(two_by_two().namespaces());
  ASSERT_EQ(del.size(), 3u);
  EXPECT_EQ(joined(del[0]), "ip netns del mctb-t-n0");
  EXPECT_EQ(joined(del[1]), "ip netns del mctb-t-n1");
  EXPECT_EQ(joined(del[2]), "ip netns del mctb-t-fab");
}

}  // namespace
}  // namespace moecomm::testbed
