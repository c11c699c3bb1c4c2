#include "cli/sim_collective.h"

#include <cstdio>
#include <ostream>

#include "cli/flag_checks.h"
#include "core/error.h"
#include "sim/trace_export.h"

namespace moecomm::cli {

namespace {

constexpr int64_t kMaxSweepSize = int64_t{1} << 40;

// nccl-tests' getFloatStr: two decimals, fewer when the width would overflow.
std::string figure(double value, int width) {
  char text[32];
  for (const char* format : {"%*.2f", "%*.1f", "%*.0f"}) {
    if (std::snprintf(text, sizeof text, format, width, value) <= width) return text;
  }
  std::snprintf(text, sizeof text, "%*.1e", width, value);
  return text;
}

}  // namespace

std::vector<int64_t> parse_size_sweep(const std::string& text, const std::string& flag) {
  const size_t colon = text.find(':');
  const int64_t lo = parse_size(text.substr(0, colon), flag, kMaxSweepSize, "1TiB");
  const int64_t hi = colon == std::string::npos
                         ? lo
                         : parse_size(text.substr(colon + 1), flag, kMaxSweepSize, "1TiB");
  if (lo > hi) throw Error(flag, "'" + text + "': the first size is larger than the last");
  std::vector<int64_t> sizes;
  for (int64_t s = lo; s <= hi; s *= 2) sizes.push_back(s);
  return sizes;
}

CollectiveSweep run_collective_sweep(const core::Topology& topology, const std::string& collective,
                                     const std::vector<int>& group,
                                     const std::vector<int64_t>& sizes,
                                     const sim::SimOptions& options) {
  const sched::OpKind kind = sim::parse_collective(collective, "--collective");
  if (group.size() < 2) throw Error("--group", "a collective needs at least 2 ranks");
  CollectiveSweep sweep{collective, topology.cluster().name, group, {}};
  for (int64_t s : sizes)
    sweep.rows.push_back(
        sim::simulate_collective(topology, kind, group, static_cast<double>(s), options));
  return sweep;
}

void print_collective_sweep(const CollectiveSweep& sweep, std::ostream& out) {
  char line[256];
  out << "# moecomm sim --collective " << sweep.collective << " on " << sweep.cluster << ": "
      << sweep.group.size() << " ranks (" << sim::format_rank_selection(sweep.group) << ")\n";
  out << "# size: "
      << (sweep.collective == "allgather"       ? "the gathered output"
          : sweep.collective == "reducescatter" ? "the input"
          : sweep.collective == "alltoall"      ? "each rank's send buffer"
                                                : "the buffer")
      << ", as nccl-tests prints it; algbw = size / time, busbw = algbw x "
      << (sweep.collective == "allreduce" ? "2(n-1)/n" : "(n-1)/n") << "\n#\n";
  std::snprintf(line, sizeof line, "# %10s  %7s  %6s  %6s\n", "size", "time", "algbw", "busbw");
  out << line;
  std::snprintf(line, sizeof line, "# %10s  %7s  %6s  %6s\n", "(B)", "(us)", "(GB/s)", "(GB/s)");
  out << line;
  double sum = 0;
  for (const sim::CollectiveRun& r : sweep.rows) {
    std::snprintf(line, sizeof line, "%12lld  %7s  %6s  %6s\n", static_cast<long long>(r.bytes),
                  figure(r.time_s * 1e6, 7).c_str(), figure(r.algbw / 1e9, 6).c_str(),
                  figure(r.busbw / 1e9, 6).c_str());
    out << line;
    sum += r.busbw / 1e9;
  }
  std::snprintf(line, sizeof line, "# %-20s : %g\n", "Avg bus bandwidth",
                sweep.rows.empty() ? 0.0 : sum / static_cast<double>(sweep.rows.size()));
  out << line;
}

nlohmann::json collective_sweep_json(const CollectiveSweep& sweep) {
  nlohmann::json rows = nlohmann::json::array();
  double sum = 0;
  for (const sim::CollectiveRun& r : sweep.rows) {
    rows.push_back({{"size_bytes", static_cast<int64_t>(r.bytes)},
                    {"time_us", r.time_s * 1e6},
                    {"algbw_GBps", r.algbw / 1e9},
                    {"busbw_GBps", r.busbw / 1e9}});
    sum += r.busbw / 1e9;
  }
  return {{"collective", sweep.collective},
          {"cluster", sweep.cluster},
          {"ranks", sweep.group.size()},
          {"group", sim::format_rank_selection(sweep.group)},
          {"rows", rows},
          {"avg_busbw_GBps", sweep.rows.empty() ? 0.0 : sum / double(sweep.rows.size())}};
}

}  // namespace moecomm::cli
