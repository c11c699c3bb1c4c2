#pragma once
// From measured collective times (`moecomm profile`) to a cluster file's levels and efficiency
// curves. Conventions are nccl-tests': a row's size is the per-rank buffer (A2A: the bytes one
// rank sends, its own block included; AllGather: the output; ReduceScatter: the input;
// AllReduce: the buffer), algbw = size / time and busbw = algbw x (n-1)/n, or 2(n-1)/n for
// AllReduce. busbw x time is then exactly the bytes the simulator puts on one member's link
// (sim/collective_flows.cpp), so a level's bandwidth and latency are fitted on those bytes.
#include <map>
#include <string>
#include <vector>

#include "core/cluster.h"
#include "cost/collective_model.h"
#include "cost/least_squares.h"

namespace moecomm::cost {

// One point of the sweep: `op` over `ranks` members of `level`.
struct ProfileRow {
  std::string level;
  Collective op = Collective::kAllToAll;
  int ranks = 0;
  double bytes = 0;    // the nccl-tests size above
  double seconds = 0;  // median over iterations of the slowest member
  std::string algorithm;
};

// (n-1)/n, or 2(n-1)/n for AllReduce.
double bus_factor(Collective op, int ranks);
double algbw(const ProfileRow& row);  // bytes/s
double busbw(const ProfileRow& row);  // bytes/s
// The bytes that cross one member's link: bus_factor x size.
double link_bytes(const ProfileRow& row);
// Latencies the simulator charges: a flat A2A sends all pairs at once (one latency), a ring
// pays one per step (n-1 for AllGather and ReduceScatter, 2(n-1) for AllReduce).
int sim_latency_steps(Collective op, int ranks);
// Per-message overheads (LogGP's o) the simulator and the analytical model charge one member:
// an A2A sends and receives n-1 messages, a ring step one of each.
int message_overheads(Collective op, int ranks);
// What the simulator charges beyond the bytes: latency steps x latency + overheads x o.
double fixed_seconds(Collective op, int ranks, double latency, double overhead);

// A level as the cluster file lists it: `count` workers, measured with one member each.
struct LevelSpec {
  std::string name;
  int count = 1;
};

struct LevelFit {
  std::string name;
  int count = 1;
  double bandwidth = 0;  // bytes/s
  double latency = 0;    // seconds, >= 0
  double overhead = 0;   // seconds, >= 0: LogGP's o, from the A2A and AllGather intercepts
  double r_squared = 1;  // of the alpha-beta fit
  int sizes = 0;         // A2A sizes the fit used (the bandwidth-bound ones)
};

// Bandwidth, latency and per-message overhead of `level` from its A2A rows: t = alpha +
// link_bytes / bandwidth, fitted over the sizes where the time is at least twice the smallest
// size's (alpha at most half of it), or over all sizes when fewer than two are. alpha =
// latency + 2(n-1) o; with n >= 3 and AllGather rows, whose intercept is (n-1)(latency + 2o),
// the two intercepts separate o from the latency (o = 0 otherwise, or when noise makes it
// negative). A negative intercept is noise: the
// latency becomes 0 and the efficiency curves take up the difference. Throws moecomm::Error
// on fewer than two A2A sizes, non-positive or non-finite times or sizes, group sizes other
// than the level's count, or times that do not grow with size.
LevelFit fit_level(const std::vector<ProfileRow>& rows, const LevelSpec& level);

// Efficiency of `op` at `level` per measured size: the share of `fit`'s bandwidth that makes
// the analytical model reproduce the time, t = model latency + link_bytes / (bandwidth x e),
// clamped to (0, 1] (1 where the time is within the model's latency). Sorted by size.
core::CurvePoints efficiency_points(const std::vector<ProfileRow>& rows, Collective op,
                                    const LevelFit& fit);

struct ProfileFit {
  std::vector<LevelFit> levels;  // outermost first, as given
  // level -> collective name -> points, for every collective measured at the level.
  std::map<std::string, std::map<std::string, core::CurvePoints>> efficiency;
};

// Fits every level (each must have rows); rows of other levels are an error.
ProfileFit fit_profile(const std::vector<ProfileRow>& rows, const std::vector<LevelSpec>& levels);

// The cluster file: the fitted levels and curves, `device`, and a description naming the
// fits' R^2 (parse_cluster accepts no other extra key), as parse_cluster reads it back: throws
// moecomm::Error naming the key when a fitted or measured value is outside the file's ranges.
core::Cluster profiled_cluster(const ProfileFit& fit, const core::Device& device,
                               const std::string& name);

}  // namespace moecomm::cost
