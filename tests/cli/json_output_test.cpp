#include "cli/json_output.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace moecomm::cli {
namespace {

TEST(JsonOutput, FiguresKeepTwelveSignificantDigits) {
  EXPECT_EQ(round_figure(104.76847103999994), 104.76847104);
  EXPECT_EQ(round_figure(64.4445094399999), 64.44450944);
  EXPECT_EQ(round_figure(473745408.00000006), 473745408.0);
  EXPECT_EQ(round_figure(0.1 + 0.2), 0.3);
  EXPECT_EQ(round_figure(1.0 / 3), 0.333333333333);
  EXPECT_EQ(round_figure(-2.5e-7), -2.5e-7);
  EXPECT_EQ(round_figure(0.0), 0.0);
  EXPECT_TRUE(std::isinf(round_figure(std::numeric_limits<double>::infinity())));
}

TEST(JsonOutput, DumpRoundsEveryFloatAndLeavesIntegersAndStrings) {
  const nlohmann::json j = {{"busy_ms", 104.76847103999994},
                            {"bytes", int64_t{2619211776}},
                            {"share", {0.1 + 0.2, 1.0 / 3}},
                            {"name", "node[0].out"}};
  EXPECT_EQ(dump_json(j, -1), R"({"busy_ms":104.76847104,"bytes":2619211776,"name":"node[0].out",)"
                              R"("share":[0.3,0.333333333333]})");
}

}  // namespace
}  // namespace moecomm::cli
