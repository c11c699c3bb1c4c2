#include "testbed/testbed_spec.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "support/expect_error.h"

namespace moecomm::testbed {
namespace {

TestbedSpec valid() {
  TestbedSpec spec{.name = "t"};  // constructed: assigning trips GCC 12 -O3 -Wrestrict
  spec.nodes = 4;
  spec.ranks_per_node = 2;
  spec.datacenters = 2;
  spec.node_link = parse_link("200mbit", "--node-link");
  spec.dc_link = parse_link("1gbit", "--dc-link");
  return spec;
}

TEST(TestbedSpecTest, NamesAndAddresses) {
  const TestbedSpec spec = valid();
  EXPECT_EQ(spec.fabric_namespace(), "mctb-t-fab");
  EXPECT_EQ(spec.node_namespace(3), "mctb-t-n3");
  EXPECT_EQ(spec.node_hostname(3), "node3");
  EXPECT_EQ(spec.node_address(0), "10.213.0.1");
  EXPECT_EQ(spec.node_address(254), "10.213.0.255");
  EXPECT_EQ(spec.node_address(255), "10.213.1.0");  // a host address inside a /16
  EXPECT_EQ(spec.node_address(999), "10.213.3.232");
  EXPECT_EQ(spec.datacenter_of(1), 0);
  EXPECT_EQ(spec.datacenter_of(2), 1);
  const std::vector<std::string> all = {"mctb-t-n0", "mctb-t-n1", "mctb-t-n2", "mctb-t-n3",
                                        "mctb-t-fab"};
  EXPECT_EQ(spec.namespaces(), all);
}

TEST(TestbedSpecTest, RecognisesItsOwnNamespacesOnly) {
  EXPECT_TRUE(is_testbed_namespace("mctb-a-fab", "a"));
  EXPECT_TRUE(is_testbed_namespace("mctb-a-n12", "a"));
  EXPECT_FALSE(is_testbed_namespace("mctb-a-n", "a"));
  EXPECT_FALSE(is_testbed_namespace("mctb-a-n1x", "a"));
  // Testbed "a-b" is not testbed "a", nor "a-n0" testbed "a".
  EXPECT_FALSE(is_testbed_namespace("mctb-a-b-fab", "a"));
  EXPECT_FALSE(is_testbed_namespace("mctb-a-n0-n3", "a"));
  EXPECT_TRUE(is_testbed_namespace("mctb-a-n0-n3", "a-n0"));
  EXPECT_FALSE(is_testbed_namespace("other", "a"));
}

TEST(TestbedSpecTest, ValidationNamesTheFlag) {
  EXPECT_NO_THROW(valid().validate());
  TestbedSpec s = valid();
  s.nodes = 0;
  EXPECT_ERROR_HAS(s.validate(), "--nodes", "got 0");
  s = valid();
  s.nodes = 1001;
  EXPECT_ERROR_HAS(s.validate(), "--nodes", "between 1 and 1000");
  s = valid();
  s.ranks_per_node = 0;
  EXPECT_ERROR_HAS(s.validate(), "--ranks-per-node", "got 0");
  s = valid();
  s.datacenters = 3;
  EXPECT_ERROR_HAS(s.validate(), "--datacenters", "divide --nodes (4)", "got 3");
  s = valid();
  s.datacenters = 0;
  EXPECT_ERROR_HAS(s.validate(), "--datacenters");
  s = valid();
  s.dc_link.reset();
  EXPECT_ERROR_HAS(s.validate(), "--dc-link", "required with --datacenters > 1");
  s = valid();
  s.datacenters = 1;
  EXPECT_ERROR_HAS(s.validate(), "--dc-link", "needs --datacenters > 1");
  s = valid();
  s.node_link = LinkSpec{};
  EXPECT_ERROR_HAS(s.validate(), "--node-link", "required");
  for (const char* bad :
       {"", "-x", "_x", "a/b", "a b", "x.y", "123456789012345678901234567890123"}) {
    s = valid();
    s.name = bad;
    EXPECT_ERROR_HAS(s.validate(), "--name", "letters, digits");
  }
  s = valid();
  s.name = "Run_2-b";
  EXPECT_NO_THROW(s.validate());
}

TEST(TestbedSpecTest, StateRoundTrip) {
  const std::string dir = ::testing::TempDir() + "/testbed_state_rt";
  std::filesystem::create_directories(dir);
  TestbedSpec spec = valid();
  spec.node_link = parse_link("1.5GBps,5ms", "--node-link");
  write_state(dir, spec);
  const TestbedSpec back = read_state(dir);
  EXPECT_EQ(back.name, "t");
  EXPECT_EQ(back.nodes, 4);
  EXPECT_EQ(back.ranks_per_node, 2);
  EXPECT_EQ(back.datacenters, 2);
  EXPECT_EQ(back.node_link.text, "1.5GBps,5ms");
  EXPECT_DOUBLE_EQ(back.node_link.rate_Bps, 1.5e9);
  EXPECT_DOUBLE_EQ(back.node_link.latency_s, 0.005);
  ASSERT_TRUE(back.dc_link.has_value());
  EXPECT_DOUBLE_EQ(back.dc_link->rate_Bps, 125e6);
  EXPECT_EQ(to_json(back), to_json(spec));
  // The derived layout is in the file for people and scripts.
  const nlohmann::json j = to_json(spec);
  EXPECT_EQ(j["subnet"], "10.213.0.0/16");
  EXPECT_EQ(j["node_list"][3]["address"], "10.213.0.4");
  EXPECT_EQ(j["node_list"][3]["namespace"], "mctb-t-n3");
  EXPECT_EQ(j["node_list"][3]["datacenter"], 1);
  EXPECT_EQ(j["fabric_namespace"], "mctb-t-fab");

  TestbedSpec one = valid();
  one.datacenters = 1;
  one.dc_link.reset();
  write_state(dir, one);
  EXPECT_FALSE(read_state(dir).dc_link.has_value());
  std::filesystem::remove_all(dir);
}

TEST(TestbedSpecTest, BrokenStateIsAnErrorNamingTheFile) {
  const std::string dir = ::testing::TempDir() + "/testbed_state_bad";
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/state.json") << R"({"name": "t", "nodes": 3, "ranks_per_node": 1,
    "datacenters": 2, "node_link": {"text": "1gbit", "rate_Bps": 1.25e8, "latency_s": 0},
    "dc_link": {"text": "1gbit", "rate_Bps": 1.25e8, "latency_s": 0}})";
  EXPECT_ERROR_HAS(read_state(dir), "state.json", "inconsistent", "--datacenters");
  std::ofstream(dir + "/state.json") << R"({"name": "t"})";
  EXPECT_ERROR_HAS(read_state(dir), "state.json", "nodes");
  EXPECT_ERROR_HAS(read_state(dir + "/nope"), "nope/state.json");
  std::filesystem::remove_all(dir);
}

TEST(TestbedSpecTest, StateDirectoryFollowsTheEnvironment) {
  const char* saved = std::getenv("MOECOMM_TESTBED_DIR");
  const std::string keep = saved ? saved : "";
  unsetenv("MOECOMM_TESTBED_DIR");
  EXPECT_EQ(state_dir("x"), "/run/moecomm-testbed/x");
  setenv("MOECOMM_TESTBED_DIR", "/tmp/tbs", 1);
  EXPECT_EQ(state_dir("x"), "/tmp/tbs/x");
  if (saved) {
    setenv("MOECOMM_TESTBED_DIR", keep.c_str(), 1);
  } else {
    unsetenv("MOECOMM_TESTBED_DIR");
  }
}

}  // namespace
}  // namespace moecomm::testbed
