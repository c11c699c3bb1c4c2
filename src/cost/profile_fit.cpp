#include "cost/profile_fit.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>

#include "core/error.h"

namespace moecomm::cost {

namespace {

constexpr Collective kOps[] = {Collective::kAllToAll, Collective::kAllGather,
                               Collective::kReduceScatter, Collective::kAllReduce};

std::string row_where(const ProfileRow& r) {
  char size[32];
  std::snprintf(size, sizeof size, "%.0f", r.bytes);
  return "profile row " + r.level + " " + collective_name(r.op) + " " + size + " bytes";
}

void check_row(const ProfileRow& r, const LevelSpec& level) {
  if (!(r.bytes > 0) || !std::isfinite(r.bytes)) throw Error(row_where(r), "size must be positive");
  if (!(r.seconds > 0) || !std::isfinite(r.seconds))
    throw Error(row_where(r), "time must be positive and finite");
  if (r.ranks != level.count)
    throw Error(row_where(r), "measured over " + std::to_string(r.ranks) +
                                  " ranks, but the level has " + std::to_string(level.count) +
                                  " workers");
}

// The level's rows of `op`, checked, sorted by size, without repeated sizes.
std::vector<ProfileRow> rows_of(const std::vector<ProfileRow>& rows, const LevelSpec& level,
                                Collective op) {
  std::vector<ProfileRow> out;
  for (const ProfileRow& r : rows)
    if (r.level == level.name && r.op == op) {
      check_row(r, level);
      out.push_back(r);
    }
  std::sort(out.begin(), out.end(),
            [](const ProfileRow& a, const ProfileRow& b) { return a.bytes < b.bytes; });
  for (size_t i = 1; i < out.size(); ++i)
    if (out[i].bytes == out[i - 1].bytes) throw Error(row_where(out[i]), "size measured twice");
  return out;
}

}  // namespace

double bus_factor(Collective op, int ranks) {
  const double share = (ranks - 1.0) / ranks;
  return op == Collective::kAllReduce ? 2 * share : share;
}

double algbw(const ProfileRow& row) {
  return row.bytes / row.seconds;
}
double busbw(const ProfileRow& row) {
  return algbw(row) * bus_factor(row.op, row.ranks);
}
double link_bytes(const ProfileRow& row) {
  return row.bytes * bus_factor(row.op, row.ranks);
}

int sim_latency_steps(Collective op, int ranks) {
  switch (op) {
    case Collective::kAllToAll:
      return 1;
    case Collective::kAllGather:
    case Collective::kReduceScatter:
      return ranks - 1;
    case Collective::kAllReduce:
      return 2 * (ranks - 1);
  }
  return 0;
}

int message_overheads(Collective op, int ranks) {
  // A2A: n-1 messages sent and n-1 received; a ring step: one of each.
  return op == Collective::kAllToAll ? 2 * (ranks - 1) : 2 * sim_latency_steps(op, ranks);
}

double fixed_seconds(Collective op, int ranks, double latency, double overhead) {
  return sim_latency_steps(op, ranks) * latency + message_overheads(op, ranks) * overhead;
}

namespace {

// The alpha-beta line of one collective's rows: over the sizes that take at least twice the
// smallest's time (the bandwidth-bound ones) when they tilt it upwards, else every size.
struct SizeLine {
  LineFit fit;
  int samples = 0;  // the sizes it used
};
std::optional<SizeLine> size_line(const std::vector<ProfileRow>& rows) {
  if (rows.size() < 2) return std::nullopt;
  double shortest = rows.front().seconds;
  for (const ProfileRow& r : rows) shortest = std::min(shortest, r.seconds);
  std::vector<std::pair<double, double>> bound, all;
  for (const ProfileRow& r : rows) {
    all.emplace_back(link_bytes(r), r.seconds);
    if (r.seconds >= 2 * shortest) bound.emplace_back(link_bytes(r), r.seconds);
  }
  // Few bandwidth-bound sizes on a noisy machine can tilt that line flat: then every size.
  const bool use_bound = bound.size() >= 2 && fit_alpha_beta(bound).line.beta > 0;
  const auto& samples = use_bound ? bound : all;
  return SizeLine{fit_alpha_beta(samples), static_cast<int>(samples.size())};
}

// LogGP's o from the intercepts: an A2A's is L + 2(n-1) o, a ring AllGather's (n-1)(L + 2o),
// so they differ by 2(n-2) o. Needs n >= 3 and an AllGather line; 0 otherwise (or when noise
// makes it negative).
double fit_overhead(const std::vector<ProfileRow>& rows, const LevelSpec& level, double a2a_alpha) {
  if (level.count < 3) return 0.0;
  const auto ring = size_line(rows_of(rows, level, Collective::kAllGather));
  if (!ring) return 0.0;
  const double step = ring->fit.line.alpha / (level.count - 1);
  return std::max(0.0, (a2a_alpha - step) / (2.0 * (level.count - 2)));
}

}  // namespace

LevelFit fit_level(const std::vector<ProfileRow>& rows, const LevelSpec& level) {
  const std::vector<ProfileRow> a2a = rows_of(rows, level, Collective::kAllToAll);
  const std::string where = "level " + level.name + ": alltoall";
  const auto f = size_line(a2a);
  if (!f)
    throw Error(where,
                "measured at " + std::to_string(a2a.size()) + " size(s); the fit needs at least 2");
  const AlphaBeta& line = f->fit.line;
  if (!(line.beta > 0))
    throw Error(where, "the times do not grow with the size; measure larger sizes (--max-bytes)");
  const double alpha = std::max(line.alpha, 0.0);
  const double overhead = fit_overhead(rows, level, alpha);
  const double latency = std::max(0.0, alpha - 2.0 * (level.count - 1) * overhead);
  return {level.name, level.count,      1.0 / line.beta, latency,
          overhead,   f->fit.r_squared, f->samples};
}

core::CurvePoints efficiency_points(const std::vector<ProfileRow>& rows, Collective op,
                                    const LevelFit& fit) {
  core::CurvePoints points;
  for (const ProfileRow& r : rows_of(rows, {fit.name, fit.count}, op)) {
    const double rest = r.seconds - fixed_seconds(op, r.ranks, fit.latency, fit.overhead);
    const double e = rest > 0 ? link_bytes(r) / (fit.bandwidth * rest) : 1.0;
    // The cluster file states efficiencies in [kShare.min, 1].
    points.emplace_back(r.bytes, std::clamp(e, core::kShare.min, core::kShare.max));
  }
  return points;
}

ProfileFit fit_profile(const std::vector<ProfileRow>& rows, const std::vector<LevelSpec>& levels) {
  for (const ProfileRow& r : rows)
    if (std::none_of(levels.begin(), levels.end(),
                     [&](const LevelSpec& l) { return l.name == r.level; }))
      throw Error(row_where(r), "names no profiled level");
  ProfileFit fit;
  for (const LevelSpec& level : levels) {
    fit.levels.push_back(fit_level(rows, level));
    for (Collective op : kOps) {
      core::CurvePoints points = efficiency_points(rows, op, fit.levels.back());
      if (!points.empty()) fit.efficiency[level.name][collective_name(op)] = std::move(points);
    }
  }
  return fit;
}

core::Cluster profiled_cluster(const ProfileFit& fit, const core::Device& device,
                               const std::string& name) {
  core::Cluster c;
  c.name = name;
  c.device = device;
  c.efficiency = fit.efficiency;
  c.network_priorities = false;  // MPI over TCP and shared memory has no traffic classes
  // TCP connections share a link per flow: congestion control converges there, and connections
  // with bounded, equal windows (the testbed's) share a FIFO queue so at once.
  c.fairness = core::Fairness::kPerFlow;
  std::string fits;
  for (const LevelFit& l : fit.levels) {
    c.levels.push_back({l.name, l.count, l.bandwidth, l.latency, l.overhead});
    char text[96];
    std::snprintf(text, sizeof text, "%s%s R^2 %.4f over %d sizes", fits.empty() ? "" : "; ",
                  l.name.c_str(), l.r_squared, l.sizes);
    fits += text;
  }
  c.description =
      "measured by moecomm profile. Per level, bandwidth and latency are an alpha-beta fit of "
      "the alltoall time against the bytes crossing one worker's link (" +
      fits +
      "); efficiency = the share of that bandwidth that reproduces each measured time after "
      "the model's latencies. MPI over TCP and shared memory serves every transfer alike: no "
      "network priorities.";
  // Read back as `--cluster FILE` will read it: a fit outside the file's stated ranges (a
  // bandwidth above 1 PB/s from times that barely grow) is refused here, naming the key.
  core::parse_cluster(core::cluster_to_json(c), "the fitted cluster \"" + name + "\"");
  return c;
}

}  // namespace moecomm::cost
