#pragma once
// `moecomm bench --trace FILE`: the last measured step of every strategy beside the
// simulator's schedule of it, as one Chrome trace (Trace Event Format; Perfetto,
// chrome://tracing). Per strategy, one process per rank for the measurement and one per rank
// for the simulation, each with a track per stream holding its ops, both from 0 at the step's
// start, so where a prediction misses shows as the ops that moved.
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "rt/call_trace.h"
#include "sched/schedule.h"

namespace moecomm::cli {

struct BenchRun;

// Trace events of a measured step: "X" events (name = the op's label, cat = its first dotted
// part, args.what = its kind) with pid = rank and tid = stream, and the "M" events naming
// them (the stream names of `schedule`, the step that ran, as the simulated trace).
nlohmann::json measured_trace_events(const std::vector<rt::CallEvent>& calls,
                                     const sched::Schedule& schedule);

// {"traceEvents": [...], "displayTimeUnit": "ms"}: case i's measured ranks are processes
// 2 i R + r, its simulated ones (2 i + 1) R + r, named "NAME measured rank r" and "NAME
// simulated rank r" and sorted so.
nlohmann::json bench_trace(const BenchRun& run);
// Throws Error naming --trace when the file cannot be written.
void write_bench_trace(const BenchRun& run, const std::string& path);

}  // namespace moecomm::cli
