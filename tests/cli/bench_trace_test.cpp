// `moecomm bench --trace`: a measured step's calls as Chrome trace events, and every
// strategy's measured and simulated ranks as processes of one trace.
#include "cli/bench_trace.h"

#include <gtest/gtest.h>

#include <map>
#include <string>

#include "cli/bench_report.h"
#include "support/expect_error.h"

namespace moecomm::cli {
namespace {

std::vector<rt::CallEvent> calls() {
  return {{0, 0, "forward", "", 0.0, 0.010},
          {0, 0, "moe.dispatch.a2a [layer 0]", "all_to_all_v", 0.002, 0.0035},
          {1, 1, "grad.dense.allreduce [layer 1, part 1/1]", "all_reduce", 0.004, 0.006}};
}

// The step that ran, as the schedule names its streams.
sched::Schedule step() {
  sched::Schedule s(2);
  s.name_stream(0, "compute");
  s.name_stream(1, "token comm");
  return s;
}

// The simulator's events for ranks 0 and 1, as sim::chrome_trace names them.
nlohmann::json simulated() {
  return nlohmann::json::array(
      {{{"name", "process_name"},
        {"ph", "M"},
        {"pid", 0},
        {"tid", 0},
        {"args", {{"name", "rank 0"}}}},
       {{"name", "moe.dispatch.a2a"},
        {"ph", "X"},
        {"pid", 0},
        {"tid", 1},
        {"ts", 1.0},
        {"dur", 2.0}},
       {{"name", "compute"}, {"ph", "X"}, {"pid", 1}, {"tid", 0}, {"ts", 0.0}, {"dur", 5.0}}});
}

TEST(BenchTrace, MeasuredCallsBecomeCompleteEventsInMicroseconds) {
  const nlohmann::json events = measured_trace_events(calls(), step());
  std::vector<nlohmann::json> x;
  std::map<std::pair<int, int>, std::string> thread_names;
  for (const nlohmann::json& e : events) {
    if (e["ph"] == "X") x.push_back(e);
    if (e["name"] == "thread_name") thread_names[{e["pid"], e["tid"]}] = e["args"]["name"];
  }
  ASSERT_EQ(x.size(), 3u);
  EXPECT_EQ(x[0]["cat"], "phase");
  EXPECT_FALSE(x[0].contains("args"));
  EXPECT_EQ(x[1]["name"], "moe.dispatch.a2a [layer 0]");
  EXPECT_EQ(x[1]["cat"], "moe");
  EXPECT_EQ(x[1]["args"]["what"], "all_to_all_v");
  EXPECT_DOUBLE_EQ(x[1]["ts"].get<double>(), 2000.0);
  EXPECT_DOUBLE_EQ(x[1]["dur"].get<double>(), 1500.0);
  EXPECT_EQ(x[2]["cat"], "grad");
  EXPECT_EQ(x[2]["pid"], 1);
  EXPECT_EQ(x[2]["tid"], 1);
  EXPECT_EQ((thread_names[{0, 0}]), "compute");  // as the simulated trace names them
  EXPECT_EQ((thread_names[{1, 1}]), "token comm");
}

TEST(BenchTrace, EachCaseGetsMeasuredThenSimulatedProcessesPerRank) {
  BenchRun run{2, 1, 1, 2, "tiny", "c.json", 0, 1, {}};
  for (const char* name : {"baseline", "lina"}) {
    BenchCase b;
    b.name = name;
    b.measured_trace = measured_trace_events(calls(), step());
    b.simulated_trace = simulated();
    run.cases.push_back(b);
  }
  const nlohmann::json trace = bench_trace(run);
  std::map<int, std::string> process;
  std::map<int, int> complete;
  for (const nlohmann::json& e : trace["traceEvents"]) {
    if (e["name"] == "process_name") {
      EXPECT_FALSE(process.contains(e["pid"])) << "pid " << e["pid"] << " named twice";
      process[e["pid"]] = e["args"]["name"];
    }
    if (e["ph"] == "X") ++complete[e["pid"]];
  }
  const std::map<int, std::string> want = {
      {0, "baseline measured rank 0"},  {1, "baseline measured rank 1"},
      {2, "baseline simulated rank 0"}, {3, "baseline simulated rank 1"},
      {4, "lina measured rank 0"},      {5, "lina measured rank 1"},
      {6, "lina simulated rank 0"},     {7, "lina simulated rank 1"}};
  EXPECT_EQ(process, want);
  const std::map<int, int> counts = {{0, 2}, {1, 1}, {2, 1}, {3, 1},
                                     {4, 2}, {5, 1}, {6, 1}, {7, 1}};
  EXPECT_EQ(complete, counts);
  EXPECT_EQ(trace["displayTimeUnit"], "ms");
}

TEST(BenchTrace, AFileThatCannotBeWrittenIsAnErrorNamingTheFlag) {
  const BenchRun run{2, 1, 1, 2, "tiny", "c.json", 0, 1, {}};
  EXPECT_ERROR_HAS(write_bench_trace(run, "/nonexistent-dir/t.json"), "--trace",
                   "/nonexistent-dir/t.json: cannot be written");
}

}  // namespace
}  // namespace moecomm::cli
