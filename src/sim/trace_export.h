#pragma once
// Exports a simulated schedule for people to look at: a Chrome trace
// (Trace Event Format JSON, opens in Perfetto and chrome://tracing) with one process per rank
// and one track per stream, and a self-contained SVG timeline. Both take a selection of ranks;
// without one, the Chrome trace keeps the first ranks of very large schedules (Perfetto
// struggles with thousands of processes) and the SVG draws every rank whose rows fit its
// height bound. Both say when they leave ranks out. Streams are named as the schedule names
// them (Schedule::stream_name: "compute", "token comm", ...).
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "sched/schedule.h"
#include "sim/simulator.h"

namespace moecomm::sim {

// Ranks and inclusive ranges separated by commas, e.g. "0-7,32", in the order given. Throws
// Error naming `where` (the flag) for an empty selection or field, a field that is not a
// rank or a range, a reversed range, a rank outside [0, world_size), or a rank given twice.
std::vector<int> parse_rank_selection(const std::string& text, int world_size,
                                      const std::string& where);
// The inverse: runs of consecutive ranks as ranges, "0-7,32".
std::string format_rank_selection(const std::vector<int>& ranks);

struct ChromeTraceOptions {
  // The ranks exported, in this order; empty: ranks [0, max_ranks).
  std::vector<int> ranks = {};
  int max_ranks = 64;
};

// A Trace Event Format metadata ("M") event: `name` (process_name, thread_sort_index, ...) of
// process `pid`, thread `tid`, with `args`.
nlohmann::json trace_metadata(const char* name, int pid, int tid, nlohmann::json args);

// {"traceEvents": [...], "displayTimeUnit": "ms", "otherData": {...}}: "M" events name each
// rank's process ("rank N", sorted in export order) and each stream's thread (its stream
// name; streams without ops on the rank are left out); each op is one "X" event with ts/dur in
// microseconds, name = label name, cat = op kind, and args with the label fields that are set,
// bytes, flops, and the collective id and group size. Throws Error when `result` does not cover the
// schedule's ops, max_ranks < 1, or a selected rank is outside the schedule or selected twice.
nlohmann::json chrome_trace(const sched::Schedule& schedule, const SimResult& result,
                            const ChromeTraceOptions& options = {});
// Throws Error naming `path` when it cannot be written.
void write_chrome_trace(const sched::Schedule& schedule, const SimResult& result,
                        const std::string& path, const ChromeTraceOptions& options = {});

struct SvgOptions {
  // The ranks drawn, top to bottom; empty: all of them.
  std::vector<int> ranks = {};
  // What ran, for the caption, e.g. "fsmoe: netmoe-moe-gpt-s on 8x8"; empty: a generic one.
  std::string title = {};
  double width_px = 1500;  // the time axis
  // One row per (rank, stream that has ops on it). Rows shrink, down to min_row_height_px,
  // to keep the plot within max_plot_height_px; the ranks whose rows still do not fit are
  // left out, and the caption says so. Op names and stream names are drawn in rows of at
  // least 11 and 8 px.
  double row_height_px = 14;
  double max_plot_height_px = 12000;
  double min_row_height_px = 2;
  double min_op_width_px = 1;  // so sub-pixel ops stay visible
  // Ops carry a tooltip while at most this many are drawn; past it none do (the caption says
  // so), which keeps the file to about 100 bytes per op instead of 200.
  int64_t max_tooltips = 20000;
};

// A caption, a legend (colour -> op kind, in OpKind order, for the kinds drawn; a dashed
// line where the last forward op ends), a time axis in ms above and below the plot, and one
// row per (rank, stream with ops) named by the stream's role, each rank's rows shaded as one
// band. Each op is a rect (class "op") coloured by kind with a tooltip giving its label and
// start/end in ms. Op names are written on the bars (class "label"): back-to-back ops of one
// name (a pipeline's chunks) share one, with their count ("moe.expert \u00d76"); a name is
// written in full, else as its last dotted parts ("dispatch.a2a", "a2a"), else cut with an
// ellipsis, whichever is longest and fits; bars too narrow for two characters stay bare.
// Throws Error like chrome_trace, or when a size option is not positive.
std::string svg_timeline(const sched::Schedule& schedule, const SimResult& result,
                         const SvgOptions& options = {});
// Throws Error naming `path` when it cannot be written.
void write_svg_timeline(const sched::Schedule& schedule, const SimResult& result,
                        const std::string& path, const SvgOptions& options = {});

}  // namespace moecomm::sim
