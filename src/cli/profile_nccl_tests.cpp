#include "cli/profile_nccl_tests.h"

#include <cmath>
#include <cstdio>
#include <fstream>
#include <ostream>

#include <nlohmann/json.hpp>

#include "cli/json_output.h"
#include "core/error.h"
#include "core/presets.h"
#include "core/units.h"
#include "plan/nccl_calibration.h"

namespace moecomm::cli {

int profile_from_nccl_tests(const NcclTestsProfile& request, std::ostream& out) {
  if (request.out_path.empty()) throw Error("--out", "must name a file");
  std::vector<cost::NcclTestsRun> runs;
  for (const std::string& file : request.files) runs.push_back(cost::read_nccl_tests(file));
  const core::Cluster base = core::load_cluster(request.base_cluster);
  int nodes = 1;
  for (const auto& run : runs) nodes = std::max(nodes, run.nodes);
  const std::string name = request.name.empty() ? "nccl-tests-" + std::to_string(nodes) + "x" +
                                                      std::to_string(runs.front().ranks_per_node())
                                                : request.name;
  const plan::NcclCalibration fit = plan::calibrate_from_nccl_tests(runs, base, name);
  const nlohmann::json cluster = core::cluster_to_json(fit.cluster);
  {
    std::ofstream f(request.out_path);
    f << dump_json(cluster) << "\n";
    if (!f) throw Error("--out", request.out_path + ": cannot be written");
  }
  double worst = 0;
  nlohmann::json checks = nlohmann::json::array();
  for (const plan::NcclCheck& c : fit.checks) {
    const double ratio = c.fitted_busbw / c.measured_busbw;
    worst = std::max(worst, std::abs(ratio - 1));
    checks.push_back({{"where", c.where},
                      {"collective", c.collective},
                      {"ranks", c.ranks},
                      {"size_bytes", static_cast<int64_t>(c.bytes)},
                      {"measured_busbw_GBps", c.measured_busbw / 1e9},
                      {"sim_busbw_GBps", c.fitted_busbw / 1e9},
                      {"ratio", ratio}});
  }
  if (request.json) {
    out << dump_json({{"cluster_file", request.out_path},
                      {"device_from", base.name},
                      {"cluster", cluster},
                      {"checks", checks},
                      {"worst_deviation", worst},
                      {"notes", fit.notes}},
                     -1)
        << "\n";
    return 0;
  }
  char line[256];
  out << "fitted " << name << " from " << runs.size() << " nccl-tests file(s); the device is "
      << base.name << "'s (nccl-tests measure no compute; --cluster picks another)\n";
  std::snprintf(line, sizeof line, "%-6s %6s %15s %11s  %s\n", "level", "count", "bandwidth_GBps",
                "latency_us", "efficiency curves (collective: min..max)");
  out << line;
  for (const core::Level& l : fit.cluster.levels) {
    std::string curves;
    const auto it = fit.cluster.efficiency.find(l.name);
    if (it != fit.cluster.efficiency.end()) {
      for (const auto& [collective, points] : it->second) {
        double lo = 1, hi = 0;
        for (const auto& [b, e] : points) lo = std::min(lo, e), hi = std::max(hi, e);
        char part[96];
        std::snprintf(part, sizeof part, "%s%s %.3f..%.3f", curves.empty() ? "" : ", ",
                      collective.c_str(), lo, hi);
        curves += part;
      }
    }
    std::snprintf(line, sizeof line, "%-6s %6d %15.2f %11.2f  %s\n", l.name.c_str(), l.count,
                  l.bandwidth / units::kGB, l.latency / units::kUs, curves.c_str());
    out << line;
  }
  out << "measured busbw beside `sim --collective` on the fitted cluster:\n";
  std::snprintf(line, sizeof line, "%-40s %-13s %5s %12s %9s %9s %6s\n", "file:line", "collective",
                "ranks", "size (B)", "measured", "sim", "ratio");
  out << line;
  for (const plan::NcclCheck& c : fit.checks) {
    std::snprintf(line, sizeof line, "%-40s %-13s %5d %12lld %9.2f %9.2f %6.3f\n", c.where.c_str(),
                  c.collective.c_str(), c.ranks, static_cast<long long>(c.bytes),
                  c.measured_busbw / 1e9, c.fitted_busbw / 1e9, c.fitted_busbw / c.measured_busbw);
    out << line;
  }
  for (const std::string& note : fit.notes) out << "note: " << note << "\n";
  std::snprintf(line, sizeof line, "largest deviation %.2f%%\n", worst * 100);
  out << line;
  out << "wrote " << request.out_path << " (moecomm sim --cluster " << request.out_path
      << " --collective alltoall --sizes 1M:4G)\n";
  return 0;
}

}  // namespace moecomm::cli
