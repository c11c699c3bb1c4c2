#include "sim/trace_export.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <string_view>
#include <vector>

#include "core/error.h"
#include "core/item_list.h"
#include "core/rank_groups.h"

namespace moecomm::sim {
namespace {

using sched::OpId;
using sched::OpKind;

void check_timings(const sched::Schedule& schedule, const SimResult& result, const char* what) {
  if (result.ops.size() != static_cast<size_t>(schedule.num_ops()))
    throw Error(what, "the simulation result has " + std::to_string(result.ops.size()) +
                          " op timings but the schedule has " + std::to_string(schedule.num_ops()) +
                          " ops");
}

// The selected ranks, checked: inside the schedule and each once.
void check_ranks(const sched::Schedule& schedule, const std::vector<int>& ranks, const char* what) {
  std::vector<bool> seen(size_t(schedule.world_size()), false);
  for (int r : ranks) {
    if (r < 0 || r >= schedule.world_size())
      throw Error(what, "rank " + std::to_string(r) + " is outside [0, " +
                            std::to_string(schedule.world_size()) + ")");
    if (seen[size_t(r)]) throw Error(what, "rank " + std::to_string(r) + " is selected twice");
    seen[size_t(r)] = true;
  }
}

// The streams that carry ops on `rank`, in stream order.
std::vector<int> busy_streams(const sched::Schedule& schedule, int rank) {
  std::vector<bool> busy(size_t(schedule.num_streams(rank)), false);
  for (OpId id : schedule.ops_of(rank)) busy[size_t(schedule.op(id).stream)] = true;
  std::vector<int> streams;
  for (size_t s = 0; s < busy.size(); ++s)
    if (busy[s]) streams.push_back(static_cast<int>(s));
  return streams;
}

void write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  if (!out) throw Error(path, "cannot open for writing");
  out << text;
  out.close();
  if (!out) throw Error(path, "write failed");
}

std::vector<int> first_ranks(int count) {
  std::vector<int> ranks(size_t(std::max(count, 0)));
  for (int r = 0; r < count; ++r) ranks[size_t(r)] = r;
  return ranks;
}

// A non-negative decimal integer that fits an int, or -1.
int parse_rank(std::string_view text) {
  if (text.empty() || text.size() > 9) return -1;
  int value = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return -1;
    value = value * 10 + (c - '0');
  }
  return value;
}

}  // namespace

std::vector<int> parse_rank_selection(const std::string& text, int world_size,
                                      const std::string& where) {
  const std::string example = " (ranks and ranges separated by commas, e.g. 0-7,32)";
  if (text.empty()) throw Error(where, "the selection is empty" + example);
  std::vector<int> ranks;
  std::vector<bool> seen(size_t(std::max(world_size, 0)), false);
  for (const std::string& field : core::split_items(text, where)) {
    const size_t dash = field.find('-');
    const int first = parse_rank(std::string_view(field).substr(0, dash));
    const int last =
        dash == std::string::npos ? first : parse_rank(std::string_view(field).substr(dash + 1));
    if (first < 0 || last < 0)
      throw Error(where, "\"" + field + "\" is neither a rank nor a range of ranks" + example);
    if (last < first)
      throw Error(where, "the range \"" + field + "\" ends before it starts: write " +
                             std::to_string(last) + "-" + std::to_string(first));
    if (last >= world_size)
      throw Error(where, "rank " + std::to_string(last) + " is outside the " +
                             std::to_string(world_size) + " ranks [0, " +
                             std::to_string(world_size - 1) + "]");
    for (int r = first; r <= last; ++r) {
      if (seen[size_t(r)]) throw Error(where, "rank " + std::to_string(r) + " is selected twice");
      seen[size_t(r)] = true;
      ranks.push_back(r);
    }
  }
  return ranks;
}

std::string format_rank_selection(const std::vector<int>& ranks) {
  return core::format_rank_ranges(ranks, ",");
}

namespace {

// ---------------------------------------------------------------- Chrome trace

double to_us(double seconds) {
  return seconds * 1e6;
}

void add_rank_metadata(const sched::Schedule& schedule, int rank, int sort_index,
                       nlohmann::json& events) {
  events.push_back(
      trace_metadata("process_name", rank, 0, {{"name", "rank " + std::to_string(rank)}}));
  events.push_back(trace_metadata("process_sort_index", rank, 0, {{"sort_index", sort_index}}));
  for (int s : busy_streams(schedule, rank)) {  // an empty track would only take room
    events.push_back(trace_metadata("thread_name", rank, s, {{"name", schedule.stream_name(s)}}));
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
  return {{"name", std::string(schedule.label(id).name())},
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
  check_timings(schedule, result, "chrome trace");
  if (options.max_ranks < 1)
    throw Error("chrome trace",
                "max_ranks must be at least 1, got " + std::to_string(options.max_ranks));
  check_ranks(schedule, options.ranks, "chrome trace");
  const std::vector<int> ranks =
      options.ranks.empty() ? first_ranks(std::min(schedule.world_size(), options.max_ranks))
                            : options.ranks;
  nlohmann::json events = nlohmann::json::array();
  int64_t ops = 0;
  for (size_t i = 0; i < ranks.size(); ++i) {
    add_rank_metadata(schedule, ranks[i], static_cast<int>(i), events);
    for (OpId id : schedule.ops_of(ranks[i])) events.push_back(op_event(schedule, result, id));
    ops += static_cast<int64_t>(schedule.ops_of(ranks[i]).size());
  }
  const int exported = static_cast<int>(ranks.size());
  nlohmann::json other = {{"ranks", schedule.world_size()},
                          {"ranks_exported", exported},
                          {"ops", schedule.num_ops()},
                          {"ops_exported", ops},
                          {"makespan_ms", result.makespan_s * 1e3}};
  if (exported < schedule.world_size()) {
    other["note"] =
        "only ranks " + format_rank_selection(ranks) + " of " +
        std::to_string(schedule.world_size()) + " are exported" +
        (options.ranks.empty() ? " (max_ranks = " + std::to_string(options.max_ranks) + ")"
                               : std::string(" (selected)"));
  }
  return {{"traceEvents", std::move(events)}, {"displayTimeUnit", "ms"}, {"otherData", other}};
}

void write_chrome_trace(const sched::Schedule& schedule, const SimResult& result,
                        const std::string& path, const ChromeTraceOptions& options) {
  write_text(path, chrome_trace(schedule, result, options).dump() + "\n");
}

// ---------------------------------------------------------------- SVG timeline
namespace {

struct KindStyle {
  const char* fill;
  const char* text;  // a label colour legible on `fill`
};
// Tableau 10: distinguishable, legible on white; A2A red, AllReduce purple, compute blue.
constexpr std::array<KindStyle, sched::kNumOpKinds> kKindStyle = {{
    {"#4e79a7", "#ffffff"},  // compute
    {"#bab0ac", "#000000"},  // copy
    {"#f28e2b", "#000000"},  // send
    {"#ffbe7d", "#000000"},  // recv
    {"#e15759", "#ffffff"},  // all_to_all
    {"#59a14f", "#ffffff"},  // all_gather
    {"#8cd17d", "#000000"},  // reduce_scatter
    {"#b07aa1", "#ffffff"},  // all_reduce
    {"#edc948", "#000000"},  // broadcast
}};

constexpr double kLeft = 170;  // row headers: "rank 1023" left, "intra-node comm" right
constexpr double kRight = 30;  // room for the last tick's label
constexpr double kCaptionY = 18;
constexpr double kLegendY = 42;   // the legend's text baseline
constexpr double kTop = 72;       // the plot: caption, legend and tick labels above it
constexpr double kBottom = 26;    // tick labels below it
constexpr double kFont = 11;      // body text, px
constexpr double kLabelRow = 11;  // the least row height with op names on the bars
constexpr double kStreamRow = 8;  // the least row height with stream names
constexpr double kRankLabel = 7;  // the least height of a rank label
constexpr double kLabelPad = 2;   // between a bar's edge and its label
constexpr const char* kEllipsis = "\u2026";

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
// A coordinate in px: two decimals at most keep the file small and the drawing exact.
std::string px(double value) {
  return num(std::round(value * 100) / 100, 8);
}

// The width `text` takes at `font` px, erring wide for DejaVu Sans (what rsvg-convert
// renders with on Debian), whose advances are 0.28-0.32 em for dots and i, 0.35-0.41 for r,
// t, f, brackets and spaces, at most 0.64 for the other lowercase letters and digits, up to
// 1 for m, w, capitals, the ellipsis and the multiplication sign.
double text_width(const std::string& text, double font) {
  double em = 0;
  for (unsigned char c : text) {
    if ((c & 0xC0) == 0x80) continue;  // a UTF-8 continuation byte: counted with its lead
    if (std::string_view(".,:;'|!ijl").find(char(c)) != std::string_view::npos)
      em += 0.32;
    else if (std::string_view("rtf()[]-/ ").find(char(c)) != std::string_view::npos)
      em += 0.42;
    else if (c == 'm' || c == 'w' || (c >= 'A' && c <= 'Z') || c >= 0x80)
      em += 1.0;
    else
      em += 0.64;
  }
  return em * font;
}

// The op name that fits `room` px, followed by `count` (" \u00d72" for a run of two ops; ""
// for one): the whole name, else its last dotted parts ("dispatch.a2a", then "a2a"), else the
// last part cut short with an ellipsis keeping at least two characters; empty when none fits.
std::string fitted_label(const std::string& name, const std::string& count, double room,
                         double font) {
  for (size_t from = 0;;) {
    const std::string part = name.substr(from) + count;
    if (text_width(part, font) <= room) return part;
    const size_t dot = name.find('.', from);
    if (dot == std::string::npos || dot + 1 >= name.size()) break;
    from = dot + 1;
  }
  const size_t dot = name.rfind('.');
  const std::string last = name.substr(dot == std::string::npos ? 0 : dot + 1);
  for (size_t keep = last.size() > 2 ? last.size() - 1 : 0; keep >= 2; --keep) {
    const std::string cut = last.substr(0, keep) + kEllipsis + count;
    if (text_width(cut, font) <= room) return cut;
  }
  return "";
}

struct Row {
  int rank = 0;
  int stream = sched::kNone;  // kNone: the single row of a rank without ops
};

struct Layout {
  std::vector<int> ranks;         // drawn, top to bottom
  std::vector<size_t> first_row;  // per drawn rank: its first row
  std::vector<Row> rows;
  int left_out = 0;      // selected ranks whose rows did not fit
  int64_t ops = 0;       // drawn
  bool tooltips = true;  // ops <= options.max_tooltips
  double row_h = 0;
  double t_end = 0;         // seconds at the right edge
  double forward_end = -1;  // the last forward op's end; < 0: no marker
  SvgOptions options;

  double x(double seconds) const { return kLeft + seconds / t_end * options.width_px; }
  double y(size_t row) const { return kTop + double(row) * row_h; }
  double plot_bottom() const { return y(rows.size()); }
  double width() const { return kLeft + options.width_px + kRight; }
  double height() const { return plot_bottom() + kBottom; }
  size_t rows_of(size_t i) const {
    return (i + 1 < first_row.size() ? first_row[i + 1] : rows.size()) - first_row[i];
  }
};

void check_svg_options(const SvgOptions& o) {
  const std::pair<const char*, double> sizes[] = {{"width_px", o.width_px},
                                                  {"row_height_px", o.row_height_px},
                                                  {"max_plot_height_px", o.max_plot_height_px},
                                                  {"min_row_height_px", o.min_row_height_px},
                                                  {"min_op_width_px", o.min_op_width_px}};
  for (const auto& [name, value] : sizes)
    if (!(value > 0) || !std::isfinite(value))
      throw Error("svg timeline", std::string(name) + " must be positive, got " + num(value));
  if (o.max_tooltips < 0)
    throw Error("svg timeline",
                "max_tooltips must be at least 0, got " + std::to_string(o.max_tooltips));
}

Layout make_layout(const sched::Schedule& schedule, const SimResult& result,
                   const SvgOptions& options) {
  Layout l;
  l.options = options;
  const std::vector<int> selected =
      options.ranks.empty() ? first_ranks(schedule.world_size()) : options.ranks;
  std::vector<std::vector<int>> streams;
  size_t total = 0;
  for (int r : selected) {
    streams.push_back(busy_streams(schedule, r));
    total += std::max<size_t>(1, streams.back().size());
  }
  // Shrink rows (to quarter pixels) before leaving ranks out.
  l.row_h = options.row_height_px;
  if (double(total) * l.row_h > options.max_plot_height_px)
    l.row_h = std::max(options.min_row_height_px,
                       std::floor(options.max_plot_height_px / double(total) * 4) / 4);
  for (size_t i = 0; i < selected.size(); ++i) {
    const size_t rows = std::max<size_t>(1, streams[i].size());
    if (!l.rows.empty() && double(l.rows.size() + rows) * l.row_h > options.max_plot_height_px) {
      l.left_out = static_cast<int>(selected.size() - i);
      break;
    }
    l.ranks.push_back(selected[i]);
    l.first_row.push_back(l.rows.size());
    l.ops += static_cast<int64_t>(schedule.ops_of(selected[i]).size());
    if (streams[i].empty()) l.rows.push_back({selected[i], sched::kNone});
    for (int s : streams[i]) l.rows.push_back({selected[i], s});
  }
  l.tooltips = l.ops <= options.max_tooltips;
  // The axis spans the whole step, so that selections of one step line up.
  l.t_end = result.makespan_s;
  bool backward = false;
  for (OpId id = 0; id < schedule.num_ops(); ++id) {
    l.t_end = std::max(l.t_end, result.ops[size_t(id)].end);
    const sched::Phase phase = schedule.label(id).phase;
    if (phase == sched::Phase::kForward)
      l.forward_end = std::max(l.forward_end, result.ops[size_t(id)].end);
    if (phase == sched::Phase::kBackward) backward = true;
  }
  if (!backward) l.forward_end = -1;  // a forward alone: no boundary to mark
  if (l.t_end <= 0) l.t_end = 1e-3;   // nothing ran: an arbitrary 1 ms axis
  return l;
}

// A 1-2-5 step giving about 10 ticks over the axis.
double tick_step_ms(double span_ms) {
  const double raw = span_ms / 10;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0})
    if (m * mag >= raw) return m * mag;
  return 10 * mag;
}

void svg_caption(const sched::Schedule& schedule, const SimResult& result, const Layout& l,
                 std::string& out) {
  const int world = schedule.world_size();
  std::string text = (l.options.title.empty() ? std::string("simulated step") : l.options.title) +
                     ": " + std::to_string(world) + " ranks, " +
                     std::to_string(schedule.num_ops()) + " ops, makespan " +
                     num(result.makespan_s * 1e3, 4) + " ms";
  if (static_cast<int>(l.ranks.size()) < world)
    text += "; showing ranks " + format_rank_selection(l.ranks);
  if (l.left_out > 0)
    text += " (" + std::to_string(l.left_out) +
            " selected ranks left out: their rows do not fit the height bound " +
            num(l.options.max_plot_height_px) + " px at " + num(l.row_h) +
            " px; select fewer ranks)";
  if (!l.tooltips)
    text += "; no tooltips: " + std::to_string(l.ops) + " ops drawn, more than " +
            std::to_string(l.options.max_tooltips);
  out += "<text x=\"8\" y=\"" + px(kCaptionY) + "\" font-size=\"13\" font-weight=\"bold\">" +
         xml_escape(text) + "</text>\n";
}

// Swatches for the kinds drawn, in OpKind order so the legend is stable; then the marker.
void svg_legend(const sched::Schedule& schedule, const Layout& l, std::string& out) {
  std::array<bool, sched::kNumOpKinds> seen{};
  for (int r : l.ranks)
    for (OpId id : schedule.ops_of(r)) seen[size_t(schedule.op(id).kind)] = true;
  double x = 8;
  out += "<text x=\"" + px(x) + "\" y=\"" + px(kLegendY) + "\">op kinds:</text>\n";
  x += text_width("op kinds:", kFont) + 10;
  for (int k = 0; k < sched::kNumOpKinds; ++k) {
    if (!seen[size_t(k)]) continue;
    const std::string name(to_string(static_cast<OpKind>(k)));
    out += "<rect class=\"legend\" x=\"" + px(x) + "\" y=\"" + px(kLegendY - 10) +
           "\" width=\"12\" height=\"12\" fill=\"" + kKindStyle[size_t(k)].fill + "\"/>\n";
    out += "<text x=\"" + px(x + 16) + "\" y=\"" + px(kLegendY) + "\">" + name + "</text>\n";
    x += 16 + text_width(name, kFont) + 14;
  }
  if (l.forward_end >= 0) {
    x += 10;
    out += "<line x1=\"" + px(x) + "\" y1=\"" + px(kLegendY - 10) + "\" x2=\"" + px(x) +
           "\" y2=\"" + px(kLegendY + 2) + "\" stroke=\"#000000\" stroke-dasharray=\"3 2\"/>\n";
    out += "<text x=\"" + px(x + 6) + "\" y=\"" + px(kLegendY) +
           "\">last forward op ends (backward follows)</text>\n";
    x += 6 + text_width("last forward op ends (backward follows)", kFont) + 14;
  }
  if (l.row_h >= kStreamRow || l.ranks.empty()) return;
  // Rows too thin to name: name them here when every rank has the same ones.
  std::string rows;
  for (size_t row = 0; row < l.rows_of(0); ++row) {
    const int s = l.rows[row].stream;
    rows += (row > 0 ? ", " : "") + (s == sched::kNone ? "no ops" : schedule.stream_name(s));
  }
  for (size_t i = 1; i < l.ranks.size(); ++i) {
    bool same = l.rows_of(i) == l.rows_of(0);
    for (size_t row = 0; same && row < l.rows_of(0); ++row)
      same = l.rows[l.first_row[i] + row].stream == l.rows[row].stream;
    if (!same) {
      rows = "the streams with ops (select fewer ranks for their names)";
      break;
    }
  }
  out += "<text class=\"rows\" x=\"" + px(x + 10) + "\" y=\"" + px(kLegendY) +
         "\">each rank's rows, top to bottom: " + xml_escape(rows) + "</text>\n";
}

void svg_rows(const sched::Schedule& schedule, const Layout& l, std::string& out) {
  const bool stream_names = l.row_h >= kStreamRow;
  const double stream_font = std::min(10.0, l.row_h - 2);
  for (size_t i = 0; i < l.ranks.size(); ++i) {
    const size_t first = l.first_row[i], rows = l.rows_of(i);
    const double top = l.y(first), block = double(rows) * l.row_h;
    if (i % 2 == 1)  // shade every other rank so its streams read as one band
      out += "<rect class=\"band\" x=\"0\" y=\"" + px(top) + "\" width=\"" + px(l.width()) +
             "\" height=\"" + px(block) + "\" fill=\"#eeeeee\"/>\n";
    // The rank's name: beside its first row when rows are named, else centred on its band;
    // on bands too thin for text, every few ranks.
    const double font = std::min(kFont, (stream_names ? l.row_h : block) - 1);
    const size_t every = font >= kRankLabel ? 1 : size_t(std::ceil(kRankLabel / block));
    if (i % every == 0) {
      const double f = std::max(font, kRankLabel);
      const double mid = stream_names ? top + l.row_h / 2 : top + block / 2;
      out += "<text class=\"rank\" x=\"6\" y=\"" + px(mid + f * 0.36) + "\" font-size=\"" + px(f) +
             "\" font-weight=\"bold\">rank " + std::to_string(l.ranks[i]) + "</text>\n";
    }
    if (!stream_names) continue;
    for (size_t row = first; row < first + rows; ++row) {
      const int s = l.rows[row].stream;
      const std::string name = s == sched::kNone ? "no ops" : schedule.stream_name(s);
      out += "<text class=\"stream\" x=\"" + px(kLeft - 6) + "\" y=\"" +
             px(l.y(row) + l.row_h / 2 + stream_font * 0.36) + "\" font-size=\"" + px(stream_font) +
             "\" text-anchor=\"end\" fill=\"#444444\">" + xml_escape(name) + "</text>\n";
    }
  }
}

void svg_axis(const Layout& l, std::string& out) {
  const double span_ms = l.t_end * 1e3;
  const double step = tick_step_ms(span_ms);
  for (int k = 0; k * step <= span_ms * (1 + 1e-9); ++k) {
    const std::string x = px(l.x(k * step / 1e3));
    const std::string label = num(k * step) + " ms";
    out += "<line class=\"tick\" x1=\"" + x + "\" y1=\"" + px(kTop - 4) + "\" x2=\"" + x +
           "\" y2=\"" + px(l.plot_bottom() + 4) + "\" stroke=\"#c8c8c8\" stroke-width=\"0.6\"/>\n";
    out += "<text class=\"tick\" x=\"" + x + "\" y=\"" + px(kTop - 8) +
           "\" text-anchor=\"middle\">" + label + "</text>\n";
    out += "<text class=\"tick\" x=\"" + x + "\" y=\"" + px(l.plot_bottom() + 18) +
           "\" text-anchor=\"middle\">" + label + "</text>\n";
  }
}

void svg_forward_end(const Layout& l, std::string& out) {
  if (l.forward_end < 0) return;
  const std::string x = px(l.x(l.forward_end));
  out += "<line class=\"forward-end\" x1=\"" + x + "\" y1=\"" + px(kTop - 4) + "\" x2=\"" + x +
         "\" y2=\"" + px(l.plot_bottom() + 4) +
         "\" stroke=\"#000000\" stroke-width=\"1\" stroke-dasharray=\"3 2\"/>\n";
}

void svg_op(const sched::Schedule& schedule, const SimResult& result, const Layout& l, OpId id,
            size_t row, std::string& out) {
  const sched::Op& op = schedule.op(id);
  const OpTiming& t = result.ops[size_t(id)];
  const double x = l.x(t.start);
  const double w = std::max(l.x(t.end) - x, l.options.min_op_width_px);
  const double top = l.y(row) + (l.row_h >= 4 ? 1 : 0);
  const double h = l.row_h >= 4 ? l.row_h - 2 : l.row_h;
  out += "<rect class=\"op\" x=\"" + px(x) + "\" y=\"" + px(top) + "\" width=\"" + px(w) +
         "\" height=\"" + px(h) + "\" fill=\"" + kKindStyle[size_t(op.kind)].fill + "\"";
  if (!l.tooltips) {
    out += "/>\n";
    return;
  }
  const std::string tip = sched::to_string(schedule.label(id)) + " (" +
                          std::string(to_string(op.kind)) + ", op " + std::to_string(id) + ")\n" +
                          num(t.start * 1e3) + " - " + num(t.end * 1e3) + " ms";
  out += "><title>" + xml_escape(tip) + "</title></rect>\n";
}

// Names on the bars of one row, whose ops are in time order. Back-to-back ops of one name
// (the chunks of a pipelined collective) share one name across their run, with its length.
void svg_row_labels(const sched::Schedule& schedule, const SimResult& result, const Layout& l,
                    const std::vector<OpId>& ops, size_t row, double font, std::string& out) {
  for (size_t i = 0; i < ops.size();) {
    const sched::OpRole role = schedule.label(ops[i]).role;
    const std::string name(sched::to_string(role));
    size_t j = i;
    while (j + 1 < ops.size() && schedule.label(ops[j + 1]).role == role &&
           l.x(result.ops[size_t(ops[j + 1])].start) - l.x(result.ops[size_t(ops[j])].end) < 0.5)
      ++j;
    const double x = l.x(result.ops[size_t(ops[i])].start);
    const double w = std::max(l.x(result.ops[size_t(ops[j])].end) - x, l.options.min_op_width_px);
    const std::string count = j > i ? " \u00d7" + std::to_string(j - i + 1) : "";
    const std::string text = fitted_label(name, count, w - 2 * kLabelPad, font);
    if (!text.empty())
      out += "<text class=\"label\" x=\"" + px(x + kLabelPad) + "\" y=\"" +
             px(l.y(row) + l.row_h / 2 + font * 0.36) + "\" fill=\"" +
             kKindStyle[size_t(schedule.op(ops[i]).kind)].text + "\">" + xml_escape(text) +
             "</text>\n";
    i = j + 1;
  }
}

}  // namespace

std::string svg_timeline(const sched::Schedule& schedule, const SimResult& result,
                         const SvgOptions& options) {
  check_timings(schedule, result, "svg timeline");
  check_ranks(schedule, options.ranks, "svg timeline");
  check_svg_options(options);
  const Layout l = make_layout(schedule, result, options);
  std::string out = "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + px(l.width()) +
                    "\" height=\"" + px(l.height()) + "\" viewBox=\"0 0 " + px(l.width()) + " " +
                    px(l.height()) + "\" font-family=\"DejaVu Sans, Arial, sans-serif\" " +
                    "font-size=\"" + px(kFont) + "\">\n";
  out += "<rect class=\"background\" width=\"100%\" height=\"100%\" fill=\"#ffffff\"/>\n";
  svg_caption(schedule, result, l, out);
  svg_legend(schedule, l, out);
  svg_rows(schedule, l, out);
  svg_axis(l, out);
  // Bars, then the names over them. A hairline between bars keeps back-to-back ops (the
  // chunks of a pipeline) apart, on rows tall enough to spare it.
  const double label_font = l.row_h >= kLabelRow ? std::min(9.0, l.row_h - 4) : 0;
  std::string labels;
  out += l.row_h >= kStreamRow
             ? "<g stroke=\"#000000\" stroke-opacity=\"0.35\" stroke-width=\"0.5\">\n"
             : "<g>\n";
  for (size_t i = 0; i < l.ranks.size(); ++i) {
    // Each row's ops in stream order, which is the order they run in.
    const size_t first = l.first_row[i], rows = l.rows_of(i);
    std::vector<std::vector<OpId>> row_ops(rows);
    for (OpId id : schedule.ops_of(l.ranks[i])) {
      size_t row = 0;
      while (row + 1 < rows && l.rows[first + row].stream != schedule.op(id).stream) ++row;
      row_ops[row].push_back(id);
    }
    for (size_t row = 0; row < rows; ++row) {
      for (OpId id : row_ops[row]) svg_op(schedule, result, l, id, first + row, out);
      if (label_font > 0)
        svg_row_labels(schedule, result, l, row_ops[row], first + row, label_font, labels);
    }
  }
  out += "</g>\n";
  if (label_font > 0) out += "<g font-size=\"" + px(label_font) + "\">\n" + labels + "</g>\n";
  svg_forward_end(l, out);
  out += "</svg>\n";
  return out;
}

void write_svg_timeline(const sched::Schedule& schedule, const SimResult& result,
                        const std::string& path, const SvgOptions& options) {
  write_text(path, svg_timeline(schedule, result, options));
}

}  // namespace moecomm::sim
