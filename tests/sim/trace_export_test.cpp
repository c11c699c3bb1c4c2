#include "sim/trace_export.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "support/expect_error.h"

namespace moecomm::sim {
namespace {

using sched::Label;
using sched::OpId;
using sched::OpKind;
using sched::Phase;

// 2 ranks, computes on stream 0 and collectives on stream 1: attention compute -> A2A ->
// expert compute (chunk 1) and an independent gradient AllReduce. Timings are set by hand in
// whole microseconds so ts/dur are known exactly; the AllReduce on rank 1 is 1 ns long, far
// under a pixel.
struct Fixture {
  sched::Schedule s{2};
  std::vector<OpId> attn, expert;
  sched::Schedule::Issued a2a, allreduce;
  SimResult result;

  Fixture() {
    for (int r = 0; r < 2; ++r)
      attn.push_back(
          s.add_compute(r, 0, 1e9, 1e6, Label{"attn & <qkv>", 0, Phase::kForward, -1, "baseline"}));
    sched::CollectiveSpec spec;
    spec.kind = OpKind::kAllToAll;
    spec.group = {0, 1};
    spec.pair_bytes = {0, 300, 300, 0};
    spec.label = Label{"moe.dispatch.a2a", 0, Phase::kForward, -1, "baseline"};
    a2a = s.add_collective(spec, 1, {{attn[0]}, {attn[1]}});
    for (int r = 0; r < 2; ++r)
      expert.push_back(s.add_compute(r, 0, 2e9, 2e6,
                                     Label{"moe.expert", 0, Phase::kForward, 1, "fsmoe"},
                                     {a2a.ops[size_t(r)]}));
    sched::CollectiveSpec ar;
    ar.kind = OpKind::kAllReduce;
    ar.group = {0, 1};
    ar.bytes = 8e6;
    ar.label = Label{"dense.grad.allreduce", -1, Phase::kBackward, -1, ""};
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
      EXPECT_EQ(m.at("args").at("name"), "stream " + std::to_string(tid));
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
    EXPECT_EQ(e->at("name"), f.s.label(id).name);
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
  EXPECT_NE(other.at("note").get<std::string>().find("max_ranks = 1"), std::string::npos);
}

TEST(ChromeTrace, BadInputsAreErrors) {
  Fixture f;
  EXPECT_ERROR_HAS(chrome_trace(f.s, f.result, {.max_ranks = 0}), "max_ranks", "0");
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

TEST(SvgTimeline, OneRectPerOpAndLegendPerKind) {
  Fixture f;
  const std::string svg = svg_timeline(f.s, f.result);
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_EQ(svg.substr(svg.size() - 7), "</svg>\n");
  EXPECT_EQ(count(svg, "<rect class=\"op\""), size_t(f.s.num_ops()));
  EXPECT_EQ(count(svg, "<rect class=\"legend\""), 3u);  // compute, all_to_all, all_reduce
  // Balanced elements, as a parser would need.
  EXPECT_EQ(count(svg, "<text"), count(svg, "</text>"));
  EXPECT_EQ(count(svg, "<title>"), count(svg, "</title>"));
  EXPECT_EQ(count(svg, "<rect class=\"op\""), count(svg, "</rect>"));  // op rects hold a title
  // Labels are escaped; tooltips give start and end in ms.
  EXPECT_NE(svg.find("attn &amp; &lt;qkv&gt;"), std::string::npos);
  EXPECT_EQ(svg.find("attn & <"), std::string::npos);
  EXPECT_NE(svg.find("2.5 - 4.25 ms"), std::string::npos);
  EXPECT_NE(svg.find(">all_to_all</text>"), std::string::npos);
  EXPECT_EQ(svg.find("showing ranks"), std::string::npos);
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

TEST(SvgTimeline, MaxRanksCapsRowsAndSaysSo) {
  Fixture f;
  const std::string svg = svg_timeline(f.s, f.result, {.max_ranks = 1});
  EXPECT_EQ(count(svg, "<rect class=\"op\""), f.s.ops_of(0).size());
  EXPECT_NE(svg.find("showing ranks 0-0 of 2 (max_ranks = 1)"), std::string::npos);
  EXPECT_EQ(svg.find("rank 1 stream"), std::string::npos);
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
