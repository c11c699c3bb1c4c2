// The report's byte totals are whole 64-bit counts: a total past them is an error naming
// what to reduce, never a wrapped negative count.
#include "sim/sim_report.h"

#include <gtest/gtest.h>

#include "support/expect_error.h"

namespace moecomm::sim {
namespace {

TEST(SimReport, ByteTotalsAreWholeCounts) {
  SimResult result;
  result.bytes_by_level = {2619211775.999999, 0};
  const nlohmann::json j = report_to_json(SimReport{}, result);
  EXPECT_EQ(j["bytes_by_level"], nlohmann::json::array({2619211776, 0}));
}

TEST(SimReport, ATotalPast64BitCountsIsRefusedNamingWhatToReduce) {
  SimResult result;
  result.bytes_by_level = {1e19};  // llround would give -9223372036854775808
  EXPECT_ERROR_HAS(report_to_json(SimReport{}, result), "a level's links total",
                   "reduce seq_len, micro_batch, layers or the cluster's size");
  result.bytes_by_level = {};
  result.busiest_links = {{"node0.out", 5e18, 1.0}};
  EXPECT_ERROR_HAS(report_to_json(SimReport{}, result), "link node0.out total",
                   "beyond 64-bit counts");
}

}  // namespace
}  // namespace moecomm::sim
