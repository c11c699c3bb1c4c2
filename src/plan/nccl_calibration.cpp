#include "plan/nccl_calibration.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

#include "core/error.h"
#include "core/topology.h"
#include "cost/efficiency_curve.h"
#include "cost/least_squares.h"
#include "sim/collective_bench.h"

namespace moecomm::plan {

namespace {

using cost::NcclTestsRun;
using sched::OpKind;

constexpr int kNode = 0, kGpu = 1;  // the two levels' roles

// A file's collective on the cluster: latencies paid and bytes per byte of S on the busiest
// link of each level (0: no flow there).
struct Terms {
  int steps = 1;
  double c[2] = {0, 0};
};

Terms terms(const NcclTestsRun& run) {
  const OpKind kind = sim::parse_collective(run.collective, run.where);
  const int n = run.ranks, r = run.ranks_per_node();
  Terms t;
  if (kind == OpKind::kAllToAll) {
    if (run.nodes > 1) t.c[kNode] = double(r) * (n - r) / n;
    if (r > 1) t.c[kGpu] = (r - 1.0) / n;
    return t;
  }
  t.steps = kind == OpKind::kAllReduce ? 2 * (n - 1) : n - 1;
  const double f = sim::bus_factor(kind, n);
  if (run.nodes > 1) t.c[kNode] = f;
  if (r > 1) t.c[kGpu] = f;
  return t;
}

struct LevelFit {
  double latency = 0, bandwidth = 0;
  std::map<std::string, core::CurvePoints> curves;
};

// The time of `run`'s collective at S due to a fitted level.
double level_time(const LevelFit& fit, const NcclTestsRun& run, int level, double bytes) {
  const Terms t = terms(run);
  if (t.c[level] == 0) return 0;
  const auto it = fit.curves.find(run.collective);
  const double eff = it == fit.curves.end() ? 1.0 : cost::EfficiencyCurve(it->second).at(bytes);
  return t.steps * fit.latency + t.c[level] * bytes / (fit.bandwidth * eff);
}

LevelFit fit_level(const std::vector<const NcclTestsRun*>& runs, int level, const LevelFit* inner,
                   std::vector<std::string>& notes) {
  LevelFit fit;
  double latency = std::numeric_limits<double>::infinity(), cap = latency;
  for (const NcclTestsRun* run : runs) {
    std::vector<std::pair<double, double>> smallest;
    for (size_t i = 0; i < run->rows.size() && i < 4; ++i)
      smallest.emplace_back(run->rows[i].bytes, run->rows[i].time_s);
    const int steps = terms(*run).steps;
    latency = std::min(latency, std::max(0.0, cost::fit_alpha_beta(smallest).line.alpha) / steps);
    for (const auto& row : run->rows) cap = std::min(cap, 0.5 * row.time_s / steps);
  }
  fit.latency = std::min(latency, cap);
  // Per row: the bandwidth the level showed, where it (not the inner level) bounds the time.
  std::map<std::string, std::map<double, std::vector<double>>> shown;
  for (const NcclTestsRun* run : runs) {
    const Terms t = terms(*run);
    for (const auto& row : run->rows) {
      if (inner && level_time(*inner, *run, kGpu, row.bytes) >= row.time_s) {
        notes.push_back(run->where + ":" + std::to_string(row.line) +
                        ": the intra-node fit alone takes as long; no inter-node point");
        continue;
      }
      const double left = row.time_s - t.steps * fit.latency;
      shown[run->collective][row.bytes].push_back(t.c[level] * row.bytes / left);
    }
  }
  for (const auto& [collective, per_size] : shown)
    for (const auto& [bytes, bws] : per_size)
      for (double bw : bws) fit.bandwidth = std::max(fit.bandwidth, bw);
  if (!(fit.bandwidth > 0))
    throw Error(runs.front()->where, std::string(level == kNode ? "node" : "gpu") +
                                         " level: no row that this level bounds");
  for (const auto& [collective, per_size] : shown) {
    core::CurvePoints& points = fit.curves[collective];
    for (const auto& [bytes, bws] : per_size) {
      double sum = 0;
      for (double bw : bws) sum += bw;
      const double eff = sum / static_cast<double>(bws.size()) / fit.bandwidth;
      if (eff < core::kShare.min)
        notes.push_back(collective + " at " + std::to_string(static_cast<long long>(bytes)) +
                        " bytes: efficiency " + std::to_string(eff) +
                        " is below the file format's 0.001, held at 0.001");
      points.emplace_back(bytes, std::clamp(eff, core::kShare.min, 1.0));
    }
  }
  return fit;
}

}  // namespace

NcclCalibration calibrate_from_nccl_tests(const std::vector<NcclTestsRun>& runs,
                                          const core::Cluster& base, const std::string& name) {
  if (runs.empty()) throw Error("--from-nccl-tests", "no files");
  const int r = runs.front().ranks_per_node();
  int nodes = 1;
  std::vector<const NcclTestsRun*> single, multi;
  for (const NcclTestsRun& run : runs) {
    if (run.ranks_per_node() != r)
      throw Error(run.where, std::to_string(run.ranks_per_node()) + " ranks per node, but " +
                                 runs.front().where + " has " + std::to_string(r) +
                                 ": one cluster has one node size");
    nodes = std::max(nodes, run.nodes);
    (run.nodes > 1 ? multi : single).push_back(&run);
  }
  if (r > 1 && single.empty())
    throw Error(multi.front()->where,
                "spans several nodes, but no file measures one node: the intra-node level "
                "must be fitted first (give a single-node run of any of the collectives)");
  NcclCalibration out;
  core::Cluster& c = out.cluster;
  c.name = name;
  c.description = "fitted by moecomm profile --from-nccl-tests";
  c.device = base.device;
  c.network_priorities = base.network_priorities;
  c.fairness = base.fairness;
  LevelFit gpu, node;
  if (r > 1) gpu = fit_level(single, kGpu, nullptr, out.notes);
  if (nodes > 1) node = fit_level(multi, kNode, r > 1 ? &gpu : nullptr, out.notes);
  const auto add = [&c](const std::string& level, int count, const LevelFit& fit) {
    c.levels.push_back({level, count, fit.bandwidth, fit.latency});
    for (const auto& [collective, points] : fit.curves) c.efficiency[level][collective] = points;
  };
  if (nodes > 1) add("node", nodes, node);
  if (r > 1) add("gpu", r, gpu);
  // Every measured row beside the fitted cluster's prediction, by the simulator itself.
  const core::Topology topology(c);
  sim::SimOptions exact;
  exact.completion_tolerance = 0;
  for (const NcclTestsRun& run : runs) {
    std::vector<int> group(run.ranks);
    for (int i = 0; i < run.ranks; ++i) group[i] = i;
    const OpKind kind = sim::parse_collective(run.collective, run.where);
    for (const auto& row : run.rows) {
      const sim::CollectiveRun s =
          sim::simulate_collective(topology, kind, group, row.bytes, exact);
      out.checks.push_back({run.where + ":" + std::to_string(row.line), run.collective, run.ranks,
                            row.bytes, row.bytes / row.time_s * sim::bus_factor(kind, run.ranks),
                            s.busbw});
    }
  }
  return out;
}

}  // namespace moecomm::plan
