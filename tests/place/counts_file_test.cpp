#include "place/counts_file.h"

#include <gtest/gtest.h>

#include "support/expect_error.h"

namespace moecomm::place {
namespace {

using nlohmann::json;

json good() {
  return json::parse(R"({"num": [[3, 1], [0, 4], [1, 0], [2, 2]],
                         "expert_device": [0, 3], "devices_per_node": 2})");
}

TEST(CountsFile, ReadsAnInstanceWithDefaults) {
  const CountsInstance in = parse_counts(good(), "c.json");
  EXPECT_EQ(in.num.samples, 4);
  EXPECT_EQ(in.num.experts, 2);
  EXPECT_EQ(in.num.at(3, 1), 2);
  EXPECT_EQ(in.grid.devices_per_node, 2);
  EXPECT_EQ(in.grid.nodes, 2);  // expert on device 3 needs a second node of 2
  EXPECT_EQ(in.sample_device, (std::vector<int>{0, 1, 2, 3}));
  json j = good();
  j["sample_device"] = {3, 3, 0, 1};
  EXPECT_EQ(parse_counts(j, "c.json").sample_device, (std::vector<int>{3, 3, 0, 1}));
}

TEST(CountsFile, RejectsBadInstancesNamingTheKey) {
  json j = good();
  j["num"][2] = {1};
  EXPECT_ERROR_HAS(parse_counts(j, "c.json"), "c.json: num[2]", "ragged", "1 entries");
  j = good();
  j["num"][1][0] = -1;
  EXPECT_ERROR_HAS(parse_counts(j, "c.json"), "num[1][0]", "-1 is outside");
  j = good();
  j["num"][1][0] = 1.5;
  EXPECT_ERROR_HAS(parse_counts(j, "c.json"), "num[1][0]", "must be an integer");
  j = good();
  j["expert_device"] = {0};
  EXPECT_ERROR_HAS(parse_counts(j, "c.json"), "expert_device", "1 entries", "(2)");
  j = good();
  j["devices"] = 3;
  EXPECT_ERROR_HAS(parse_counts(j, "c.json"), "devices", "not a multiple of devices_per_node 2");
  j = good();
  j["devices"] = 8;
  EXPECT_ERROR_HAS(parse_counts(j, "c.json"), "4 samples cannot fill 8 devices");
  j = good();
  j["sample_device"] = {0, 1, 2, 4};
  EXPECT_ERROR_HAS(parse_counts(j, "c.json"), "sample_device[3]", "4 is outside [0, 3]");
  j = good();
  j["nmu"] = 1;
  EXPECT_ERROR_HAS(parse_counts(j, "c.json"), "nmu");
  j = good();
  j.erase("devices_per_node");
  EXPECT_ERROR_HAS(parse_counts(j, "c.json"), "devices_per_node");
  EXPECT_ERROR_HAS(read_counts_file("/nonexistent/c.json"), "/nonexistent/c.json");
}

}  // namespace
}  // namespace moecomm::place
