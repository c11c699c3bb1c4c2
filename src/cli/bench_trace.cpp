#include "cli/bench_trace.h"

#include <fstream>
#include <set>
#include <utility>

#include "cli/bench_report.h"
#include "core/error.h"
#include "sim/trace_export.h"

namespace moecomm::cli {
namespace {

std::string category(const rt::CallEvent& e) {
  if (e.what.empty()) return "phase";
  return e.label.substr(0, e.label.find_first_of(". "));
}

// Moves `events` (pids = ranks) to processes offset + rank, named "title rank r".
void append_shifted(nlohmann::json& out, const nlohmann::json& events, int offset,
                    const std::string& title) {
  std::set<int> ranks;
  for (nlohmann::json e : events) {
    const int rank = e["pid"].get<int>();
    if (e["ph"] == "M" && (e["name"] == "process_name" || e["name"] == "process_sort_index"))
      continue;
    ranks.insert(rank);
    e["pid"] = offset + rank;
    out.push_back(std::move(e));
  }
  for (int rank : ranks) {
    out.push_back(sim::trace_metadata("process_name", offset + rank, 0,
                                      {{"name", title + " rank " + std::to_string(rank)}}));
    out.push_back(sim::trace_metadata("process_sort_index", offset + rank, 0,
                                      {{"sort_index", offset + rank}}));
  }
}

}  // namespace

nlohmann::json measured_trace_events(const std::vector<rt::CallEvent>& calls,
                                     const sched::Schedule& schedule) {
  nlohmann::json events = nlohmann::json::array();
  std::set<std::pair<int, int>> threads;
  for (const rt::CallEvent& e : calls) {
    nlohmann::json x = {{"name", e.label},
                        {"cat", category(e)},
                        {"ph", "X"},
                        {"pid", e.rank},
                        {"tid", e.thread},
                        {"ts", e.begin_s * 1e6},
                        {"dur", (e.end_s - e.begin_s) * 1e6}};
    if (!e.what.empty()) x["args"] = {{"what", e.what}};
    events.push_back(std::move(x));
    threads.emplace(e.rank, e.thread);
  }
  for (const auto& [rank, thread] : threads) {
    events.push_back(
        sim::trace_metadata("process_name", rank, 0, {{"name", "rank " + std::to_string(rank)}}));
    events.push_back(
        sim::trace_metadata("thread_name", rank, thread, {{"name", schedule.stream_name(thread)}}));
    events.push_back(
        sim::trace_metadata("thread_sort_index", rank, thread, {{"sort_index", thread}}));
  }
  return events;
}

nlohmann::json bench_trace(const BenchRun& run) {
  nlohmann::json events = nlohmann::json::array();
  for (size_t i = 0; i < run.cases.size(); ++i) {
    const BenchCase& b = run.cases[i];
    const int measured = static_cast<int>(2 * i) * run.ranks;
    append_shifted(events, b.measured_trace, measured, b.name + " measured");
    append_shifted(events, b.simulated_trace, measured + run.ranks, b.name + " simulated");
  }
  return {{"traceEvents", std::move(events)},
          {"displayTimeUnit", "ms"},
          {"otherData", {{"model", run.model}, {"cluster", run.cluster}}}};
}

void write_bench_trace(const BenchRun& run, const std::string& path) {
  std::ofstream f(path);
  if (!f) throw Error("--trace", path + ": cannot be written");
  f << bench_trace(run).dump() << "\n";
  if (!f) throw Error("--trace", path + ": write failed");
}

}  // namespace moecomm::cli
