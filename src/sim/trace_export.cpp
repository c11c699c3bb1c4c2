#include "sim/trace_export.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <vector>

#include "core/error.h"

namespace moecomm::sim {
namespace {

using sched::OpId;
using sched::OpKind;

void check_inputs(const sched::Schedule& schedule, const SimResult& result, int max_ranks,
                  const char* what) {
  if (max_ranks < 1)
    throw Error(what, "max_ranks must be at least 1, got " + std::to_string(max_ranks));
  if (result.ops.size() != static_cast<size_t>(schedule.num_ops()))
    throw Error(what, "the simulation result has " + std::to_string(result.ops.size()) +
                          " op timings but the schedule has " + std::to_string(schedule.num_ops()) +
                          " ops");
}

void write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  if (!out) throw Error(path, "cannot open for writing");
  out << text;
  out.close();
  if (!out) throw Error(path, "write failed");
}

int shown_ranks(const sched::Schedule& schedule, int max_ranks) {
  return std::min(schedule.world_size(), max_ranks);
}

// ---------------------------------------------------------------- Chrome trace

double to_us(double seconds) {
  return seconds * 1e6;
}

void add_rank_metadata(const sched::Schedule& schedule, int rank, nlohmann::json& events) {
  events.push_back(
      trace_metadata("process_name", rank, 0, {{"name", "rank " + std::to_string(rank)}}));
  events.push_back(trace_metadata("process_sort_index", rank, 0, {{"sort_index", rank}}));
  for (int s = 0; s < schedule.num_streams(rank); ++s) {
    events.push_back(
        trace_metadata("thread_name", rank, s, {{"name", "stream " + std::to_string(s)}}));
    events.push_back(trace_metadata("thread_sort_index", rank, s, {{"sort_index", s}}));
  }
}

// Only the label fields that are set, as sched::to_string(Label) prints them.
nlohmann::json op_args(const sched::Schedule& schedule, OpId id) {
  const sched::Op& op = schedule.op(id);
  const sched::Label& label = schedule.label(id);
  nlohmann::json args = {{"op", id}, {"bytes", op.bytes}};
  if (label.layer >= 0) args["layer"] = label.layer;
  if (label.phase != sched::Phase::kNone) args["phase"] = std::string(to_string(label.phase));
  if (label.chunk >= 0) args["chunk"] = label.chunk;
  if (!label.knob.empty()) args["knob"] = label.knob;
  if (op.kind == OpKind::kCompute) args["flops"] = op.flops;
  if (op.priority != 0) args["priority"] = op.priority;
  if (op.collective != sched::kNone) {
    const sched::Collective& c = schedule.collective(op.collective);
    args["collective"] = op.collective;
    args["group_size"] = c.size();
    args["algorithm"] = std::string(to_string(c.algorithm));
  }
  if (op.peer != sched::kNone) {
    args["peer"] = op.peer;
    args["tag"] = op.tag;
  }
  return args;
}

nlohmann::json op_event(const sched::Schedule& schedule, const SimResult& result, OpId id) {
  const sched::Op& op = schedule.op(id);
  const OpTiming& t = result.ops[id];
  return {{"name", schedule.label(id).name},
          {"cat", std::string(to_string(op.kind))},
          {"ph", "X"},
          {"pid", op.rank},
          {"tid", op.stream},
          {"ts", to_us(t.start)},
          {"dur", to_us(t.end - t.start)},
          {"args", op_args(schedule, id)}};
}

}  // namespace

nlohmann::json trace_metadata(const char* name, int pid, int tid, nlohmann::json args) {
  return {{"name", name}, {"ph", "M"}, {"pid", pid}, {"tid", tid}, {"args", std::move(args)}};
}

nlohmann::json chrome_trace(const sched::Schedule& schedule, const SimResult& result,
                            const ChromeTraceOptions& options) {
  check_inputs(schedule, result, options.max_ranks, "chrome trace");
  const int ranks = shown_ranks(schedule, options.max_ranks);
  nlohmann::json events = nlohmann::json::array();
  int64_t ops = 0;
  for (int r = 0; r < ranks; ++r) {
    add_rank_metadata(schedule, r, events);
    for (OpId id : schedule.ops_of(r)) events.push_back(op_event(schedule, result, id));
    ops += static_cast<int64_t>(schedule.ops_of(r).size());
  }
  nlohmann::json other = {{"ranks", schedule.world_size()},
                          {"ranks_exported", ranks},
                          {"ops", schedule.num_ops()},
                          {"ops_exported", ops},
                          {"makespan_ms", result.makespan_s * 1e3}};
  if (ranks < schedule.world_size())
    other["note"] = "only ranks 0-" + std::to_string(ranks - 1) + " of " +
                    std::to_string(schedule.world_size()) +
                    " are exported (max_ranks = " + std::to_string(options.max_ranks) + ")";
  return {{"traceEvents", std::move(events)}, {"displayTimeUnit", "ms"}, {"otherData", other}};
}

void write_chrome_trace(const sched::Schedule& schedule, const SimResult& result,
                        const std::string& path, const ChromeTraceOptions& options) {
  write_text(path, chrome_trace(schedule, result, options).dump() + "\n");
}

// ---------------------------------------------------------------- SVG timeline
namespace {

// Tableau 10: distinguishable, legible on white; A2A red, AllReduce purple, compute blue.
constexpr std::array<const char*, sched::kNumOpKinds> kKindColor = {
    "#4e79a7",  // compute
    "#bab0ac",  // copy
    "#f28e2b",  // send
    "#ffbe7d",  // recv
    "#e15759",  // all_to_all
    "#59a14f",  // all_gather
    "#8cd17d",  // reduce_scatter
    "#b07aa1",  // all_reduce
    "#edc948",  // broadcast
};

constexpr double kLeft = 130;  // room for "rank 1023 stream 12"
constexpr double kTop = 44;    // caption and tick labels
constexpr double kRight = 20;
constexpr double kLegendHeight = 40;

std::string xml_escape(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&apos;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

// Shortest readable form: "0.5", "1250", "3e-05"; enough digits for ms with us detail.
std::string num(double value, int digits = 6) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.*g", digits, value);
  return buf;
}

struct Layout {
  int ranks = 0;               // rows for ranks [0, ranks)
  std::vector<int> first_row;  // per shown rank: its stream 0's row
  int rows = 0;
  double t_end = 0;  // seconds at the right edge
  SvgOptions options;

  double x(double seconds) const { return kLeft + seconds / t_end * options.width_px; }
  double y(int row) const { return kTop + row * options.row_height_px; }
  double plot_bottom() const { return y(rows); }
  double width() const { return kLeft + options.width_px + kRight; }
  double height() const { return plot_bottom() + kLegendHeight; }
};

Layout make_layout(const sched::Schedule& schedule, const SimResult& result,
                   const SvgOptions& options) {
  Layout l;
  l.options = options;
  l.ranks = shown_ranks(schedule, options.max_ranks);
  for (int r = 0; r < l.ranks; ++r) {
    l.first_row.push_back(l.rows);
    l.rows += std::max(1, schedule.num_streams(r));  // an idle rank still gets a row
    for (OpId id : schedule.ops_of(r)) l.t_end = std::max(l.t_end, result.ops[id].end);
  }
  l.t_end = std::max(l.t_end, result.makespan_s);
  if (l.t_end <= 0) l.t_end = 1e-3;  // nothing ran: an arbitrary 1 ms axis
  return l;
}

// A 1-2-5 step giving about 8 ticks over the axis.
double tick_step_ms(double span_ms) {
  const double raw = span_ms / 8;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0})
    if (m * mag >= raw) return m * mag;
  return 10 * mag;
}

void svg_caption(const sched::Schedule& schedule, const SimResult& result, const Layout& l,
                 std::string& out) {
  std::string text = "moecomm timeline: " + std::to_string(schedule.num_ops()) + " ops on " +
                     std::to_string(schedule.world_size()) + " ranks, makespan " +
                     num(result.makespan_s * 1e3) + " ms";
  if (l.ranks < schedule.world_size())
    text += "; showing ranks 0-" + std::to_string(l.ranks - 1) + " of " +
            std::to_string(schedule.world_size()) +
            " (max_ranks = " + std::to_string(l.options.max_ranks) + ")";
  out += "<text x=\"8\" y=\"16\" font-size=\"13\">" + xml_escape(text) + "</text>\n";
}

void svg_rows(const sched::Schedule& schedule, const Layout& l, std::string& out) {
  const double h = l.options.row_height_px;
  for (int r = 0; r < l.ranks; ++r) {
    const int streams = std::max(1, schedule.num_streams(r));
    if (r % 2 == 1)  // shade every other rank so its streams read as one group
      out += "<rect class=\"band\" x=\"0\" y=\"" + num(l.y(l.first_row[r])) + "\" width=\"" +
             num(l.width()) + "\" height=\"" + num(streams * h) + "\" fill=\"#f2f2f2\"/>\n";
    for (int s = 0; s < streams; ++s)
      out += "<text x=\"6\" y=\"" + num(l.y(l.first_row[r] + s) + h * 0.75) + "\">rank " +
             std::to_string(r) + " stream " + std::to_string(s) + "</text>\n";
  }
}

void svg_axis(const Layout& l, std::string& out) {
  const double span_ms = l.t_end * 1e3;
  const double step = tick_step_ms(span_ms);
  for (int k = 0; k * step <= span_ms * (1 + 1e-9); ++k) {
    const std::string x = num(l.x(k * step / 1e3));
    out += "<line x1=\"" + x + "\" y1=\"" + num(kTop - 4) + "\" x2=\"" + x + "\" y2=\"" +
           num(l.plot_bottom()) + "\" stroke=\"#d0d0d0\" stroke-width=\"0.5\"/>\n";
    out += "<text x=\"" + x + "\" y=\"" + num(kTop - 8) + "\" text-anchor=\"middle\">" +
           num(k * step) + "</text>\n";
  }
  out += "<text x=\"" + num(kLeft - 6) + "\" y=\"" + num(kTop - 8) +
         "\" text-anchor=\"end\">ms</text>\n";
}

void svg_op(const sched::Schedule& schedule, const SimResult& result, const Layout& l, OpId id,
            std::string& out) {
  const sched::Op& op = schedule.op(id);
  const OpTiming& t = result.ops[id];
  const double x = l.x(t.start);
  const double w = std::max(l.x(t.end) - x, l.options.min_op_width_px);
  const double h = l.options.row_height_px;
  const std::string tip = sched::to_string(schedule.label(id)) + " (" +
                          std::string(to_string(op.kind)) + ", op " + std::to_string(id) + ")\n" +
                          num(t.start * 1e3) + " - " + num(t.end * 1e3) + " ms";
  out += "<rect class=\"op\" x=\"" + num(x) + "\" y=\"" +
         num(l.y(l.first_row[op.rank] + op.stream) + 1) + "\" width=\"" + num(w) + "\" height=\"" +
         num(h - 2) + "\" fill=\"" + kKindColor[size_t(op.kind)] + "\"><title>" + xml_escape(tip) +
         "</title></rect>\n";
}

// Swatches for the kinds that appear, in OpKind order so the legend is stable.
void svg_legend(const sched::Schedule& schedule, const Layout& l, std::string& out) {
  std::array<bool, sched::kNumOpKinds> seen{};
  for (int r = 0; r < l.ranks; ++r)
    for (OpId id : schedule.ops_of(r)) seen[size_t(schedule.op(id).kind)] = true;
  double x = kLeft;
  const std::string y = num(l.plot_bottom() + 16);
  for (int k = 0; k < sched::kNumOpKinds; ++k) {
    if (!seen[size_t(k)]) continue;
    const std::string name(to_string(static_cast<OpKind>(k)));
    out += "<rect class=\"legend\" x=\"" + num(x) + "\" y=\"" + y +
           "\" width=\"12\" height=\"12\" fill=\"" + kKindColor[size_t(k)] + "\"/>\n";
    out += "<text x=\"" + num(x + 16) + "\" y=\"" + num(l.plot_bottom() + 26) + "\">" + name +
           "</text>\n";
    x += 28 + 7.0 * static_cast<double>(name.size());
  }
}

}  // namespace

std::string svg_timeline(const sched::Schedule& schedule, const SimResult& result,
                         const SvgOptions& options) {
  check_inputs(schedule, result, options.max_ranks, "svg timeline");
  const Layout l = make_layout(schedule, result, options);
  std::string out = "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + num(l.width()) +
                    "\" height=\"" + num(l.height()) + "\" viewBox=\"0 0 " + num(l.width()) + " " +
                    num(l.height()) + "\" font-family=\"sans-serif\" font-size=\"11\">\n";
  out += "<rect class=\"background\" width=\"100%\" height=\"100%\" fill=\"#ffffff\"/>\n";
  svg_caption(schedule, result, l, out);
  svg_rows(schedule, l, out);
  svg_axis(l, out);
  for (int r = 0; r < l.ranks; ++r)
    for (OpId id : schedule.ops_of(r)) svg_op(schedule, result, l, id, out);
  svg_legend(schedule, l, out);
  out += "</svg>\n";
  return out;
}

void write_svg_timeline(const sched::Schedule& schedule, const SimResult& result,
                        const std::string& path, const SvgOptions& options) {
  write_text(path, svg_timeline(schedule, result, options));
}

}  // namespace moecomm::sim
