#include "cli/bench_report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <ostream>

#include "core/error.h"

namespace moecomm::cli {
namespace {

struct PhaseColumn {
  const char* name;
  double BenchPhases::*ms;
  const char* color;
};

const std::vector<PhaseColumn>& phase_columns() {
  static const std::vector<PhaseColumn> columns = {
      {"token_fwd", &BenchPhases::token_fwd_ms, "#4e79a7"},
      {"token_bwd", &BenchPhases::token_bwd_ms, "#f28e2b"},
      {"grad_sync", &BenchPhases::grad_sync_ms, "#59a14f"},
      {"step", &BenchPhases::step_ms, "#9c755f"}};
  return columns;
}

nlohmann::json phases_json(const BenchPhases& p) {
  nlohmann::json j;
  for (const PhaseColumn& c : phase_columns()) j[std::string(c.name) + "_ms"] = p.*c.ms;
  return j;
}

std::string xml_escape(const std::string& s) {
  std::string out;
  for (char ch : s) {
    if (ch == '<')
      out += "&lt;";
    else if (ch == '>')
      out += "&gt;";
    else if (ch == '&')
      out += "&amp;";
    else if (ch == '"')
      out += "&quot;";
    else
      out += ch;
  }
  return out;
}

nlohmann::json ops_json(const std::vector<OpComparison>& ops) {
  nlohmann::json out = nlohmann::json::array();
  for (const OpComparison& o : ops)
    out.push_back({{"label", o.name},
                   {"phase", o.phase},
                   {"ops_per_step", o.ops},
                   {"measured_ms", o.measured_ms},
                   {"simulated_ms", o.simulated_ms}});
  return out;
}

}  // namespace

void print_op_table(const BenchRun& run, std::ostream& out) {
  char line[256];
  for (const BenchCase& b : run.cases) {
    if (b.ops.empty()) continue;
    out << b.name
        << ": per op label, its ops in one step over all ranks, and the mean time of "
           "one op on its rank:\n";
    std::snprintf(line, sizeof line, "  %-28s %-9s %18s %12s %12s %8s\n", "label", "phase",
                  "ops/step all ranks", "measured_ms", "simulated_ms", "error");
    out << line;
    for (const OpComparison& o : b.ops) {
      std::snprintf(line, sizeof line, "  %-28.28s %-9s %18lld %12.3f %12.3f %+7.1f%%\n",
                    o.name.c_str(), o.phase.c_str(), static_cast<long long>(o.ops), o.measured_ms,
                    o.simulated_ms, 100 * prediction_error(o.measured_ms, o.simulated_ms));
      out << line;
    }
  }
}

double prediction_error(double measured, double simulated) {
  if (measured == 0) return simulated == 0 ? 0 : INFINITY;
  return (simulated - measured) / measured;
}

void print_bench_table(const BenchRun& run, std::ostream& out) {
  char line[512];
  out << "bench: " << run.model << " on " << run.ranks << " ranks (" << run.ranks_per_node
      << " per node), tp=" << run.tp << " ep=" << run.ep << ", " << run.warmup << " warm-up + "
      << run.steps << " measured steps (medians); simulator on " << run.cluster << "\n"
      << "ms per step: token_fwd, token_bwd and grad_sync the mean over ranks, step the slowest "
         "rank\n";
  std::snprintf(line, sizeof line, "%-28s %-10s %12s %19s %12s %8s\n", "strategy", "phase",
                "measured_ms", "p25..p75", "simulated_ms", "error");
  out << line;
  for (const BenchCase& b : run.cases)
    for (const PhaseColumn& c : phase_columns()) {
      const double m = b.measured.*c.ms, s = b.simulated.*c.ms;
      std::snprintf(line, sizeof line, "%-28.28s %-10s %12.2f %9.2f..%-8.2f %12.2f %+7.1f%%\n",
                    b.name.c_str(), c.name, m, b.measured_p25.*c.ms, b.measured_p75.*c.ms, s,
                    100 * prediction_error(m, s));
      out << line;
    }
  // The token path against the first strategy, and how much the gradient AllReduces slowed
  // the backward's A2As (they never run beside the forward's).
  out << "token path per step: token_ms and bwd_slowdown_ms the mean over ranks, "
         "inter_node_MB and allreduce_beside_a2a (rank-ms) the sums over all ranks\n";
  std::snprintf(line, sizeof line, "%-28s %10s %9s %15s %16s %20s\n", "strategy", "token_ms",
                "vs_first", "inter_node_MB", "bwd_slowdown_ms", "allreduce_beside_a2a");
  out << line;
  const double first = run.cases.empty() ? 0 : run.cases.front().measured.token_ms();
  for (const BenchCase& b : run.cases) {
    const double slow = b.measured.token_bwd_ms - b.measured.token_fwd_ms;
    std::snprintf(line, sizeof line,
                  "%-28.28s %10.2f %+8.1f%% %15.3f %+8.1f (%+4.0f%%) %15.1f ms\n", b.name.c_str(),
                  b.measured.token_ms(),
                  first > 0 ? 100 * (b.measured.token_ms() / first - 1) : 0.0,
                  static_cast<double>(b.token_bytes[rt::LinkLevel::kInterNode]) / 1e6, slow,
                  b.measured.token_fwd_ms > 0 ? 100 * slow / b.measured.token_fwd_ms : 0.0,
                  b.grad_overlap_s * 1e3);
    out << line;
  }
  for (const BenchCase& b : run.cases)
    for (const std::string& n : b.notes) out << "  " << b.name << ": planned: " << n << "\n";
  print_op_table(run, out);
}

nlohmann::json bench_json(const BenchRun& run) {
  nlohmann::json cases = nlohmann::json::array();
  const double first_token = run.cases.empty() ? 0 : run.cases.front().measured.token_ms();
  for (const BenchCase& b : run.cases) {
    nlohmann::json error;
    for (const PhaseColumn& c : phase_columns())
      error[c.name] = prediction_error(b.measured.*c.ms, b.simulated.*c.ms);
    cases.push_back(
        {{"name", b.name},
         {"strategy", b.strategy},
         {"notes", b.notes},
         {"measured", phases_json(b.measured)},
         {"measured_p25", phases_json(b.measured_p25)},
         {"measured_p75", phases_json(b.measured_p75)},
         {"simulated", phases_json(b.simulated)},
         {"error", error},
         {"token_bytes",
          {{"same_device", b.token_bytes[rt::LinkLevel::kSameDevice]},
           {"intra_node", b.token_bytes[rt::LinkLevel::kIntraNode]},
           {"inter_node", b.token_bytes[rt::LinkLevel::kInterNode]}}},
         {"expert_bytes",
          {{"same_device", b.expert_bytes[rt::LinkLevel::kSameDevice]},
           {"intra_node", b.expert_bytes[rt::LinkLevel::kIntraNode]},
           {"inter_node", b.expert_bytes[rt::LinkLevel::kInterNode]}}},
         {"token_ms_vs_first", first_token > 0 ? b.measured.token_ms() / first_token : 0.0},
         {"backward_slowdown_ms", b.measured.token_bwd_ms - b.measured.token_fwd_ms},
         {"grad_overlap_with_a2a_ms", b.grad_overlap_s * 1e3},
         {"loss", b.loss},
         {"ops", ops_json(b.ops)}});
  }
  return {{"ranks", run.ranks},   {"ranks_per_node", run.ranks_per_node},
          {"tp", run.tp},         {"ep", run.ep},
          {"model", run.model},   {"cluster", run.cluster},
          {"warmup", run.warmup}, {"steps", run.steps},
          {"cases", cases}};
}

void write_bench_svg(const BenchRun& run, const std::string& path) {
  const auto& cols = phase_columns();
  double top = 1e-9;
  for (const BenchCase& b : run.cases)
    for (const PhaseColumn& c : cols) top = std::max({top, b.measured.*c.ms, b.simulated.*c.ms});
  const double bar = 12, gap = 30, left = 60, plot_h = 300, base = 40 + plot_h;
  const double group = cols.size() * 2 * bar + gap;
  const double width = left + group * static_cast<double>(run.cases.size()) + 20;
  std::ofstream f(path);
  if (!f) throw Error("--svg", path + ": cannot be written");
  f << "<svg xmlns='http://www.w3.org/2000/svg' width='" << width << "' height='" << base + 90
    << "' font-family='sans-serif' font-size='11'>\n"
    << "<text x='" << left << "' y='20' font-size='13'>" << xml_escape(run.model) << " on "
    << run.ranks << " ranks: measured (solid) vs simulated (light) per step, ms</text>\n";
  for (int t = 0; t <= 4; ++t) {  // y axis ticks
    const double y = base - plot_h * t / 4;
    f << "<line x1='" << left - 4 << "' x2='" << width - 10 << "' y1='" << y << "' y2='" << y
      << "' stroke='#ddd'/><text x='" << left - 6 << "' y='" << y + 4 << "' text-anchor='end'>"
      << static_cast<int>(std::round(top * t / 4)) << "</text>\n";
  }
  for (size_t i = 0; i < run.cases.size(); ++i) {
    const BenchCase& b = run.cases[i];
    const double x0 = left + group * static_cast<double>(i) + gap / 2;
    for (size_t k = 0; k < cols.size(); ++k) {
      const double v[2] = {b.measured.*cols[k].ms, b.simulated.*cols[k].ms};
      for (int s = 0; s < 2; ++s) {
        const double h = plot_h * v[s] / top, x = x0 + (2 * k + s) * bar;
        f << "<rect x='" << x << "' y='" << base - h << "' width='" << bar - 1 << "' height='" << h
          << "' fill='" << cols[k].color << "' fill-opacity='" << (s ? 0.4 : 1.0) << "'><title>"
          << xml_escape(b.name) << " " << cols[k].name << (s ? " simulated " : " measured ") << v[s]
          << " ms</title></rect>\n";
      }
    }
    f << "<text x='" << x0 + cols.size() * bar << "' y='" << base + 16 << "' text-anchor='middle'>"
      << xml_escape(b.name) << "</text>\n";
  }
  for (size_t k = 0; k < cols.size(); ++k)
    f << "<rect x='" << left + 110 * k << "' y='" << base + 40 << "' width='10' height='10' fill='"
      << cols[k].color << "'/><text x='" << left + 110 * k + 14 << "' y='" << base + 49 << "'>"
      << cols[k].name << "</text>\n";
  f << "</svg>\n";
  if (!f) throw Error("--svg", path + ": write failed");
}

}  // namespace moecomm::cli
