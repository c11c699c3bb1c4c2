#include "sim/trace_export.h"

#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "support/expect_error.h"
#include "support/svg_text.h"

namespace moecomm::sim {
namespace {

using sched::Label;
using sched::OpId;
using sched::OpKind;
using sched::Phase;

// 2 ranks, computes on stream 0 ("compute") and collectives on stream 1 ("token comm"):
// attention compute -> A2A ->
// expert compute (chunk 1) and an independent gradient AllReduce. Timings are set by hand in
// whole microseconds so ts/dur are known exactly; the AllReduce on rank 1 is 1 ns long, far
// under a pixel.
struct Fixture {
  sched::Schedule s{2};
  std::vector<OpId> attn, expert;
  sched::Schedule::Issued a2a, allreduce;
  SimResult result;

  Fixture() {
    s.name_stream(0, "compute");
    s.name_stream(1, "token comm");
    for (int r = 0; r < 2; ++r)
      attn.push_back(
          s.add_compute(r, 0, 1e9, 1e6,
                        Label{sched::OpRole::kAttention, 0, Phase::kForward, -1, "base & <qkv>"}));
    sched::CollectiveSpec spec;
    spec.kind = OpKind::kAllToAll;
    spec.group = {0, 1};
    spec.pair_bytes = {0, 300, 300, 0};
    spec.label = Label{sched::OpRole::kDispatchA2A, 0, Phase::kForward, -1, "baseline"};
    a2a = s.add_collective(spec, 1, {{attn[0]}, {attn[1]}});
    for (int r = 0; r < 2; ++r)
      expert.push_back(s.add_compute(r, 0, 2e9, 2e6,
                                     Label{sched::OpRole::kExpert, 0, Phase::kForward, 1, "fsmoe"},
                                     {a2a.ops[size_t(r)]}));
    sched::CollectiveSpec ar;
    ar.kind = OpKind::kAllReduce;
    ar.group = {0, 1};
    ar.bytes = 8e6;
    ar.label = Label{sched::OpRole::kGradDenseAllReduce, -1, Phase::kBackward, -1, ""};
    allreduce = s.add_collective(ar, 1);
    s.validate();

    result.ops.resize(size_t(s.num_ops()));
    set(attn[0], 0, 1e-3);
    set(attn[1], 0, 1.5e-3);
    set(a2a.ops[0], 1.5e-3, 2.5e-3);
    set(a2a.ops[1], 1.5e-3, 2.5e-3);
    set(expert[0], 2.5e-3, 4e-3);
    set(expert[1], 2.5e-3, 4.25e-3);
    set(allreduce.ops[0], 2.5e-3, 3e-3);
    set(allreduce.ops[1], 4.25e-3, 4.25e-3 + 1e-9);
    result.rank_end_s = {4e-3, 4.25e-3 + 1e-9};
    result.makespan_s = 4.25e-3 + 1e-9;
  }
  void set(OpId id, double start, double end) { result.ops[size_t(id)] = {start, end}; }
};

std::vector<nlohmann::json> events_with(const nlohmann::json& trace, const std::string& ph) {
  std::vector<nlohmann::json> out;
  for (const nlohmann::json& e : trace.at("traceEvents"))
    if (e.at("ph") == ph) out.push_back(e);
  return out;
}

const nlohmann::json* find_op(const std::vector<nlohmann::json>& xs, OpId id) {
  for (const nlohmann::json& e : xs)
    if (e.at("args").at("op") == id) return &e;
  return nullptr;
}

size_t count(const std::string& text, const std::string& part) {
  size_t n = 0;
  for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
  return n;
}

TEST(ChromeTrace, MetadataNamesRanksAndStreams) {
  Fixture f;
  const nlohmann::json trace = chrome_trace(f.s, f.result);
  EXPECT_EQ(trace.at("displayTimeUnit"), "ms");
  int process_names = 0, sort_indices = 0, thread_names = 0;
  for (const nlohmann::json& m : events_with(trace, "M")) {
    const int pid = m.at("pid"), tid = m.at("tid");
    if (m.at("name") == "process_name") {
      ++process_names;
      EXPECT_EQ(m.at("args").at("name"), "rank " + std::to_string(pid));
    } else if (m.at("name") == "process_sort_index") {
      ++sort_indices;
      EXPECT_EQ(m.at("args").at("sort_index"), pid);
    } else if (m.at("name") == "thread_name") {
      ++thread_names;
      EXPECT_EQ(m.at("args").at("name"), tid == 0 ? "compute" : "token comm");
    }
  }
  EXPECT_EQ(process_names, 2);
  EXPECT_EQ(sort_indices, 2);
  EXPECT_EQ(thread_names, 4);  // (rank, stream) for 2 x 2
  EXPECT_EQ(trace.at("otherData").at("ranks_exported"), 2);
  EXPECT_FALSE(trace.at("otherData").contains("note"));
}

TEST(ChromeTrace, OneCompleteEventPerOpWithExactTimes) {
  Fixture f;
  const nlohmann::json trace = chrome_trace(f.s, f.result);
  const std::vector<nlohmann::json> xs = events_with(trace, "X");
  ASSERT_EQ(xs.size(), size_t(f.s.num_ops()));
  for (OpId id = 0; id < f.s.num_ops(); ++id) {
    const nlohmann::json* e = find_op(xs, id);
    ASSERT_NE(e, nullptr) << "op " << id;
    EXPECT_EQ(e->at("pid"), f.s.op(id).rank);
    EXPECT_EQ(e->at("tid"), f.s.op(id).stream);
    EXPECT_EQ(e->at("name"), f.s.label(id).name());
    EXPECT_EQ(e->at("cat"), std::string(to_string(f.s.op(id).kind)));
  }
  // Microseconds, from the hand-set seconds.
  const nlohmann::json& attn1 = *find_op(xs, f.attn[1]);
  EXPECT_DOUBLE_EQ(attn1.at("ts").get<double>(), 0);
  EXPECT_DOUBLE_EQ(attn1.at("dur").get<double>(), 1500);
  const nlohmann::json& expert1 = *find_op(xs, f.expert[1]);
  EXPECT_DOUBLE_EQ(expert1.at("ts").get<double>(), 2500);
  EXPECT_DOUBLE_EQ(expert1.at("dur").get<double>(), 1750);
  const nlohmann::json& a2a0 = *find_op(xs, f.a2a.ops[0]);
  EXPECT_DOUBLE_EQ(a2a0.at("ts").get<double>(), 1500);
  EXPECT_DOUBLE_EQ(a2a0.at("dur").get<double>(), 1000);
  EXPECT_EQ(a2a0.at("cat"), "all_to_all");
  EXPECT_EQ(a2a0.at("tid"), 1);
}

TEST(ChromeTrace, ArgsCarryLabelSizesAndCollective) {
  Fixture f;
  const std::vector<nlohmann::json> xs = events_with(chrome_trace(f.s, f.result), "X");
  const nlohmann::json& expert = find_op(xs, f.expert[0])->at("args");
  EXPECT_EQ(expert.at("layer"), 0);
  EXPECT_EQ(expert.at("phase"), "forward");
  EXPECT_EQ(expert.at("chunk"), 1);
  EXPECT_EQ(expert.at("knob"), "fsmoe");
  EXPECT_DOUBLE_EQ(expert.at("flops").get<double>(), 2e9);
  EXPECT_DOUBLE_EQ(expert.at("bytes").get<double>(), 2e6);
  EXPECT_FALSE(expert.contains("collective"));

  const nlohmann::json& ar = find_op(xs, f.allreduce.ops[1])->at("args");
  EXPECT_EQ(ar.at("collective"), f.allreduce.id);
  EXPECT_EQ(ar.at("group_size"), 2);
  EXPECT_EQ(ar.at("algorithm"), "ring");
  EXPECT_DOUBLE_EQ(ar.at("bytes").get<double>(), 8e6);
  EXPECT_FALSE(ar.contains("layer"));  // unset label fields are left out
  EXPECT_FALSE(ar.contains("knob"));
  EXPECT_FALSE(ar.contains("flops"));
}

TEST(ChromeTrace, MaxRanksTruncatesAndSaysSo) {
  Fixture f;
  const nlohmann::json trace = chrome_trace(f.s, f.result, {.max_ranks = 1});
  for (const nlohmann::json& e : trace.at("traceEvents")) EXPECT_EQ(e.at("pid"), 0);
  EXPECT_EQ(events_with(trace, "X").size(), f.s.ops_of(0).size());
  const nlohmann::json& other = trace.at("otherData");
  EXPECT_EQ(other.at("ranks"), 2);
  EXPECT_EQ(other.at("ranks_exported"), 1);
  EXPECT_EQ(other.at("note"), "only ranks 0 of 2 are exported (max_ranks = 1)");
}

TEST(ChromeTrace, SelectedRanksAreExportedInTheirOrder) {
  Fixture f;
  const nlohmann::json trace = chrome_trace(f.s, f.result, {.ranks = {1}});
  for (const nlohmann::json& e : trace.at("traceEvents")) EXPECT_EQ(e.at("pid"), 1);
  EXPECT_EQ(events_with(trace, "X").size(), f.s.ops_of(1).size());
  EXPECT_EQ(trace.at("otherData").at("note"), "only ranks 1 of 2 are exported (selected)");
  // Both, rank 1 first: sorted by the selection's order.
  std::map<int, int> sort_index;
  for (const nlohmann::json& m : events_with(chrome_trace(f.s, f.result, {.ranks = {1, 0}}), "M"))
    if (m.at("name") == "process_sort_index")
      sort_index[m.at("pid")] = m.at("args").at("sort_index");
  EXPECT_EQ(sort_index, (std::map<int, int>{{0, 1}, {1, 0}}));
}

TEST(ChromeTrace, BadInputsAreErrors) {
  Fixture f;
  EXPECT_ERROR_HAS(chrome_trace(f.s, f.result, {.max_ranks = 0}), "max_ranks", "0");
  EXPECT_ERROR_HAS(chrome_trace(f.s, f.result, {.ranks = {2}}), "chrome trace",
                   "rank 2 is outside [0, 2)");
  EXPECT_ERROR_HAS(svg_timeline(f.s, f.result, {.ranks = {0, 1, 0}}), "svg timeline",
                   "rank 0 is selected twice");
  EXPECT_ERROR_HAS(svg_timeline(f.s, f.result, {.width_px = 0}), "width_px must be positive");
  EXPECT_ERROR_HAS(svg_timeline(f.s, f.result, {.row_height_px = -1}), "row_height_px");
  f.result.ops.pop_back();
  EXPECT_ERROR_HAS(chrome_trace(f.s, f.result), "7 op timings", "8 ops");
  EXPECT_ERROR_HAS(svg_timeline(f.s, f.result), "svg timeline", "8 ops");
}

TEST(ChromeTrace, WritesFileAndNamesUnwritablePath) {
  Fixture f;
  const std::string path = ::testing::TempDir() + "moecomm_trace_export_test.json";
  write_chrome_trace(f.s, f.result, path);
  std::ifstream in(path);
  EXPECT_EQ(nlohmann::json::parse(in), chrome_trace(f.s, f.result));
  const std::string bad = "/nonexistent-moecomm-dir/trace.json";
  EXPECT_ERROR_HAS(write_chrome_trace(f.s, f.result, bad), bad);
}

using test::svg_texts;

// The value of attribute `name` in the first element whose start tag begins with `open`.
std::string attribute(const std::string& svg, const std::string& open, const std::string& name) {
  const size_t at = svg.find(open);
  if (at == std::string::npos) return "";
  const size_t value = svg.find(" " + name + "=\"", at) + name.size() + 3;
  return svg.substr(value, svg.find('"', value) - value);
}

using Texts = std::vector<std::string>;

TEST(SvgTimeline, OneRectPerOpAndLegendPerKind) {
  Fixture f;
  const std::string svg = svg_timeline(f.s, f.result);
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_EQ(svg.substr(svg.size() - 7), "</svg>\n");
  // 170 px of row names, 1500 of axis, 30 on the right; 72 above 4 rows of 14 px, 26 below.
  EXPECT_EQ(attribute(svg, "<svg", "width"), "1700");
  EXPECT_EQ(attribute(svg, "<svg", "height"), "154");
  EXPECT_EQ(count(svg, "<rect class=\"op\""), size_t(f.s.num_ops()));
  // Balanced elements, as a parser would need.
  EXPECT_EQ(count(svg, "<text"), count(svg, "</text>"));
  EXPECT_EQ(count(svg, "<title>"), count(svg, "</title>"));
  EXPECT_EQ(count(svg, "<rect class=\"op\""), count(svg, "</rect>"));  // op rects hold a title
  // Labels are escaped (the knob in a tooltip here); tooltips give start and end in ms.
  EXPECT_NE(svg.find("knob base &amp; &lt;qkv&gt;"), std::string::npos);
  EXPECT_EQ(svg.find("base & <"), std::string::npos);
  EXPECT_NE(svg.find("2.5 - 4.25 ms"), std::string::npos);
  EXPECT_EQ(svg.find("showing ranks"), std::string::npos);
  EXPECT_NE(svg.find(">simulated step: 2 ranks, 8 ops, makespan 4.25 ms</text>"),
            std::string::npos);
}

TEST(SvgTimeline, LegendNamesTheKindsDrawnAndTheForwardEnd) {
  Fixture f;
  const std::string svg = svg_timeline(f.s, f.result);
  EXPECT_EQ(count(svg, "<rect class=\"legend\""), 3u);
  EXPECT_NE(svg.find("fill=\"#4e79a7\"/>\n<text x=\"87.9\" y=\"42\">compute</text>"),
            std::string::npos)
      << "compute's swatch is blue and named";
  EXPECT_NE(svg.find("fill=\"#e15759\"/>\n<text x=\"168.72\" y=\"42\">all_to_all</text>"),
            std::string::npos)
      << "all_to_all's swatch is red and named";
  EXPECT_NE(svg.find("fill=\"#b07aa1\"/>\n<text x=\"252.62\" y=\"42\">all_reduce</text>"),
            std::string::npos)
      << "all_reduce's swatch is purple and named";
  EXPECT_NE(svg.find(">last forward op ends (backward follows)</text>"), std::string::npos);
  // The last forward op (rank 1's expert) ends at 4.25 ms of the 4.250001 ms axis.
  EXPECT_EQ(attribute(svg, "<line class=\"forward-end\"", "x1"), "1670");
}

TEST(SvgTimeline, TimeAxisTicksInMillisecondsAboveAndBelow) {
  Fixture f;
  const std::string svg = svg_timeline(f.s, f.result);
  // 4.25 ms: a 0.5 ms step, ticks 0 to 4 ms, each labelled above and below the rows.
  EXPECT_EQ(count(svg, "<line class=\"tick\""), 9u);
  const Texts ticks = svg_texts(svg, "<text class=\"tick\"");
  const Texts want = {"0 ms",   "0 ms",   "0.5 ms", "0.5 ms", "1 ms",   "1 ms",
                      "1.5 ms", "1.5 ms", "2 ms",   "2 ms",   "2.5 ms", "2.5 ms",
                      "3 ms",   "3 ms",   "3.5 ms", "3.5 ms", "4 ms",   "4 ms"};
  EXPECT_EQ(ticks, want);
  // 1 ms is 1500 / 4.250001 px right of the axis start (x = 170).
  EXPECT_NE(svg.find("<text class=\"tick\" x=\"522.94\" y=\"64\" text-anchor=\"middle\">1 ms"),
            std::string::npos);
  EXPECT_NE(svg.find("<text class=\"tick\" x=\"522.94\" y=\"146\" text-anchor=\"middle\">1 ms"),
            std::string::npos);
}

TEST(SvgTimeline, RowsAreNamedByRankAndStreamRole) {
  Fixture f;
  const std::string svg = svg_timeline(f.s, f.result);
  EXPECT_EQ(svg_texts(svg, "<text class=\"rank\""), (Texts{"rank 0", "rank 1"}));
  EXPECT_EQ(svg_texts(svg, "<text class=\"stream\""),
            (Texts{"compute", "token comm", "compute", "token comm"}));
  EXPECT_EQ(svg.find("stream 0"), std::string::npos);
  EXPECT_EQ(count(svg, "<rect class=\"band\""), 1u);  // rank 1's rows are shaded
}

// A stream without a name is "stream S"; a rank without ops keeps one row, "no ops"; streams
// without ops on a rank get no row.
TEST(SvgTimeline, UnnamedStreamsAndIdleRanks) {
  sched::Schedule s(2);
  s.add_compute(0, 2, 1e9, 0, Label{sched::OpRole::kGate, 0, Phase::kForward, -1, ""});
  SimResult result;
  result.ops = {{0, 1e-3}};
  result.rank_end_s = {1e-3, 0};
  result.makespan_s = 1e-3;
  const std::string svg = svg_timeline(s, result);
  EXPECT_EQ(svg_texts(svg, "<text class=\"rank\""), (Texts{"rank 0", "rank 1"}));
  EXPECT_EQ(svg_texts(svg, "<text class=\"stream\""), (Texts{"stream 2", "no ops"}));
  EXPECT_EQ(svg_texts(svg, "<text class=\"label\""), (Texts{"gate"}));
  EXPECT_EQ(svg.find("forward-end"), std::string::npos);  // no backward: nothing to mark
  // The Chrome trace names the same tracks: rank 0's stream 2 only.
  std::vector<std::pair<int, int>> threads;
  for (const nlohmann::json& m : events_with(chrome_trace(s, result), "M"))
    if (m.at("name") == "thread_name") {
      threads.emplace_back(m.at("pid"), m.at("tid"));
      EXPECT_EQ(m.at("args").at("name"), "stream 2");
    }
  EXPECT_EQ(threads, (std::vector<std::pair<int, int>>{{0, 2}}));
  // Rows too thin to name, and ranks with different rows: the note says so.
  EXPECT_EQ(svg_texts(svg_timeline(s, result, {.row_height_px = 6}), "<text class=\"rows\""),
            (Texts{"each rank's rows, top to bottom: the streams with ops (select fewer ranks "
                   "for their names)"}));
}

// Op names on the bars: whole where they fit, else their last dotted parts, else cut with an
// ellipsis; none on bars narrower than two characters. A 300 px axis over 4.25 ms: the A2As
// are 70.6 px wide, the AllReduce on rank 0 is 35.3 px, the one on rank 1 under a pixel.
TEST(SvgTimeline, LabelsAreDrawnOnBarsWhereTheyFit) {
  Fixture f;
  // Row by row: rank 0's compute row, its token comm row, then rank 1's.
  const Texts wide = svg_texts(svg_timeline(f.s, f.result), "<text class=\"label\"");
  EXPECT_EQ(wide, (Texts{"attn", "moe.expert", "moe.dispatch.a2a", "grad.dense.allreduce", "attn",
                         "moe.expert", "moe.dispatch.a2a"}));
  const Texts narrow =
      svg_texts(svg_timeline(f.s, f.result, {.width_px = 300}), "<text class=\"label\"");
  EXPECT_EQ(narrow, (Texts{"attn", "moe.expert", "dispatch.a2a", "allre\u2026", "attn",
                           "moe.expert", "dispatch.a2a"}));
  const Texts narrower =
      svg_texts(svg_timeline(f.s, f.result, {.width_px = 150}), "<text class=\"label\"");
  EXPECT_EQ(narrower, (Texts{"attn", "expert", "a2a", "attn", "moe.expert", "a2a"}));
  // Light fills get black text, dark ones white: compute is blue.
  EXPECT_EQ(attribute(svg_timeline(f.s, f.result), "<text class=\"label\"", "fill"), "#ffffff");
}

// Back-to-back ops of one name (a pipeline's chunks) share one name with their count; an op
// after a gap gets its own. 4 ms on 1500 px: the run is 1125 px, the last op 187.5 px; on
// 80 px, 60 and 10 px.
TEST(SvgTimeline, BackToBackOpsOfOneNameShareALabel) {
  sched::Schedule s(1);
  const Label expert{sched::OpRole::kExpert, 0, Phase::kForward, -1, ""};
  for (int i = 0; i < 4; ++i) s.add_compute(0, 0, 1e9, 0, expert);
  s.add_compute(0, 0, 1e9, 0, Label{sched::OpRole::kAttention, 0, Phase::kForward, -1, ""});
  SimResult result;
  result.ops = {{0, 1e-3}, {1e-3, 2e-3}, {2e-3, 3e-3}, {3.5e-3, 4e-3}, {4e-3, 4e-3 + 1e-9}};
  result.rank_end_s = {4e-3 + 1e-9};
  result.makespan_s = 4e-3 + 1e-9;
  const std::string svg = svg_timeline(s, result);
  EXPECT_EQ(svg_texts(svg, "<text class=\"label\""), (Texts{"moe.expert \u00d73", "moe.expert"}));
  EXPECT_EQ(count(svg, "<rect class=\"op\""), 5u);  // each op keeps its bar
  // Narrower, the run's name shortens as a single op's does, keeping its count.
  EXPECT_EQ(svg_texts(svg_timeline(s, result, {.width_px = 80}), "<text class=\"label\""),
            (Texts{"expert \u00d73"}));
}

TEST(SvgTimeline, SubPixelOpKeepsMinimumWidth) {
  Fixture f;
  const std::string svg = svg_timeline(f.s, f.result, {.min_op_width_px = 1.5});
  const std::string tag = ", op " + std::to_string(f.allreduce.ops[1]) + ")";
  const size_t title = svg.find(tag);
  ASSERT_NE(title, std::string::npos);
  const size_t rect = svg.rfind("<rect", title);
  EXPECT_NE(svg.substr(rect, title - rect).find("width=\"1.5\""), std::string::npos);
}

// Tooltips double the bytes per op: past max_tooltips ops drawn, none get one.
TEST(SvgTimeline, TooltipsStopPastTheirBound) {
  Fixture f;
  std::string svg = svg_timeline(f.s, f.result, {.max_tooltips = 8});
  EXPECT_EQ(count(svg, "<title>"), 8u);
  EXPECT_EQ(svg.find("no tooltips"), std::string::npos);
  svg = svg_timeline(f.s, f.result, {.max_tooltips = 7});
  EXPECT_EQ(count(svg, "<title>"), 0u);
  EXPECT_EQ(count(svg, "<rect class=\"op\""), 8u);
  EXPECT_NE(svg.find("; no tooltips: 8 ops drawn, more than 7</text>"), std::string::npos);
  EXPECT_ERROR_HAS(svg_timeline(f.s, f.result, {.max_tooltips = -1}),
                   "max_tooltips must be at least 0");
}

TEST(SvgTimeline, SelectedRanksAreTheRowsInTheirOrder) {
  Fixture f;
  std::string svg = svg_timeline(f.s, f.result, {.ranks = {1}});
  EXPECT_EQ(count(svg, "<rect class=\"op\""), f.s.ops_of(1).size());
  EXPECT_EQ(svg_texts(svg, "<text class=\"rank\""), (Texts{"rank 1"}));
  EXPECT_EQ(svg_texts(svg, "<text class=\"stream\""), (Texts{"compute", "token comm"}));
  EXPECT_NE(svg.find("; showing ranks 1</text>"), std::string::npos);
  EXPECT_EQ(attribute(svg, "<svg", "height"), "126");  // 72 + 2 rows x 14 + 26
  svg = svg_timeline(f.s, f.result, {.ranks = {1, 0}});
  EXPECT_EQ(svg_texts(svg, "<text class=\"rank\""), (Texts{"rank 1", "rank 0"}));
  EXPECT_EQ(svg.find("showing ranks"), std::string::npos);  // every rank is drawn
}

// Rows shrink to keep the plot within its bound, dropping names that no longer fit; past the
// least row height, the ranks that do not fit are left out and the caption says so.
TEST(SvgTimeline, RowsShrinkThenRanksAreLeftOutToBoundTheHeight) {
  Fixture f;
  std::string svg = svg_timeline(f.s, f.result, {.max_plot_height_px = 30});
  EXPECT_EQ(attribute(svg, "<svg", "height"), "128");  // 72 + 4 rows x 7.5 + 26
  EXPECT_EQ(count(svg, "<rect class=\"op\""), size_t(f.s.num_ops()));
  EXPECT_EQ(svg_texts(svg, "<text class=\"rank\""), (Texts{"rank 0", "rank 1"}));
  EXPECT_EQ(count(svg, "<text class=\"stream\""), 0u);  // rows under 8 px: named once, above
  EXPECT_EQ(svg_texts(svg, "<text class=\"rows\""),
            (Texts{"each rank's rows, top to bottom: compute, token comm"}));
  EXPECT_EQ(count(svg, "<text class=\"label\""), 0u);  // rows under 11 px

  svg = svg_timeline(f.s, f.result, {.max_plot_height_px = 10, .min_row_height_px = 4});
  EXPECT_EQ(attribute(svg, "<svg", "height"), "106");  // 72 + 2 rows x 4 + 26
  EXPECT_EQ(svg_texts(svg, "<text class=\"rank\""), (Texts{"rank 0"}));
  EXPECT_EQ(count(svg, "<rect class=\"op\""), f.s.ops_of(0).size());
  EXPECT_NE(svg.find("; showing ranks 0 (1 selected ranks left out: their rows do not fit the "
                     "height bound 10 px at 4 px; select fewer ranks)"),
            std::string::npos);
}

TEST(RankSelection, RanksAndRangesInTheOrderGiven) {
  EXPECT_EQ(parse_rank_selection("0-7,32", 64, "--ranks"),
            (std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7, 32}));
  EXPECT_EQ(parse_rank_selection("5,2-3,0", 8, "--ranks"), (std::vector<int>{5, 2, 3, 0}));
  EXPECT_EQ(parse_rank_selection("7-7", 8, "--ranks"), (std::vector<int>{7}));
  EXPECT_EQ(format_rank_selection({0, 1, 2, 3, 4, 5, 6, 7, 32}), "0-7,32");
  EXPECT_EQ(format_rank_selection({5, 2, 3, 0}), "5,2-3,0");
  EXPECT_EQ(format_rank_selection({}), "");
}

TEST(RankSelection, BadSelectionsAreErrorsNamingTheFlag) {
  EXPECT_ERROR_HAS(parse_rank_selection("", 8, "--ranks"), "--ranks: the selection is empty",
                   "e.g. 0-7,32");
  EXPECT_ERROR_HAS(parse_rank_selection("0-3,,5", 8, "--ranks"),
                   "--ranks: item 2 of \"0-3,,5\" is empty (separate items by single commas");
  EXPECT_ERROR_HAS(parse_rank_selection("1,", 8, "--ranks"), "--ranks: item 2 of \"1,\" is empty");
  EXPECT_ERROR_HAS(parse_rank_selection("a", 8, "--ranks"),
                   "--ranks: \"a\" is neither a rank nor a range of ranks");
  EXPECT_ERROR_HAS(parse_rank_selection("-1", 8, "--ranks"), "\"-1\" is neither");
  EXPECT_ERROR_HAS(parse_rank_selection("1-", 8, "--ranks"), "\"1-\" is neither");
  EXPECT_ERROR_HAS(parse_rank_selection("1-2-3", 8, "--ranks"), "\"1-2-3\" is neither");
  EXPECT_ERROR_HAS(parse_rank_selection(" 1", 8, "--ranks"), "\" 1\" is neither");
  EXPECT_ERROR_HAS(parse_rank_selection("7-0", 8, "--ranks"),
                   "--ranks: the range \"7-0\" ends before it starts: write 0-7");
  EXPECT_ERROR_HAS(parse_rank_selection("0-8", 8, "--ranks"),
                   "--ranks: rank 8 is outside the 8 ranks [0, 7]");
  EXPECT_ERROR_HAS(parse_rank_selection("99999999999", 8, "--ranks"), "is neither");
  EXPECT_ERROR_HAS(parse_rank_selection("0-3,2", 8, "--ranks"),
                   "--ranks: rank 2 is selected twice");
}

TEST(SvgTimeline, WritesFileAndNamesUnwritablePath) {
  Fixture f;
  const std::string path = ::testing::TempDir() + "moecomm_trace_export_test.svg";
  write_svg_timeline(f.s, f.result, path);
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_EQ(text.str(), svg_timeline(f.s, f.result));
  const std::string bad = "/nonexistent-moecomm-dir/timeline.svg";
  EXPECT_ERROR_HAS(write_svg_timeline(f.s, f.result, bad), bad, "cannot open");
}

}  // namespace
}  // namespace moecomm::sim
