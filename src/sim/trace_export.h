#pragma once
// Exports a simulated schedule for people to look at: a Chrome trace
// (Trace Event Format JSON, opens in Perfetto and chrome://tracing) with one process per rank
// and one track per stream, and a self-contained SVG timeline. Both show only the first ranks
// of very large schedules so the files stay openable; they say so when they do.
#include <string>

#include <nlohmann/json.hpp>

#include "sched/schedule.h"
#include "sim/simulator.h"

namespace moecomm::sim {

struct ChromeTraceOptions {
  // Ranks [0, max_ranks) are exported; Perfetto struggles with thousands of processes.
  int max_ranks = 64;
};

// A Trace Event Format metadata ("M") event: `name` (process_name, thread_sort_index, ...) of
// process `pid`, thread `tid`, with `args`.
nlohmann::json trace_metadata(const char* name, int pid, int tid, nlohmann::json args);

// {"traceEvents": [...], "displayTimeUnit": "ms", "otherData": {...}}: "M" events name each
// rank's process ("rank N", sorted by N) and each stream's thread ("stream S"); each op is one
// "X" event with ts/dur in microseconds, name = label name, cat = op kind, and args with the
// label fields that are set, bytes, flops, and the collective id and group size.
// Throws Error when `result` does not cover the schedule's ops or max_ranks < 1.
nlohmann::json chrome_trace(const sched::Schedule& schedule, const SimResult& result,
                            const ChromeTraceOptions& options = {});
// Throws Error naming `path` when it cannot be written.
void write_chrome_trace(const sched::Schedule& schedule, const SimResult& result,
                        const std::string& path, const ChromeTraceOptions& options = {});

struct SvgOptions {
  int max_ranks = 32;          // rows are drawn for ranks [0, max_ranks) only
  double width_px = 1200;      // the time axis
  double row_height_px = 16;   // one row per (rank, stream)
  double min_op_width_px = 1;  // so sub-pixel ops stay visible
};

// One row per (rank, stream), a time axis in ms, one rect per op colored by op kind (legend at
// the bottom) with a tooltip giving its label and start/end in ms. Op rects have class "op",
// legend swatches class "legend". Throws Error like chrome_trace.
std::string svg_timeline(const sched::Schedule& schedule, const SimResult& result,
                         const SvgOptions& options = {});
// Throws Error naming `path` when it cannot be written.
void write_svg_timeline(const sched::Schedule& schedule, const SimResult& result,
                        const std::string& path, const SvgOptions& options = {});

}  // namespace moecomm::sim
