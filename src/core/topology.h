#pragma once
// Where each rank sits in a multilevel cluster, and which link joins two ranks.
#include <optional>
#include <vector>

#include "core/cluster.h"

namespace moecomm::core {

class Topology {
 public:
  static constexpr int kSameDevice = -1;

  explicit Topology(Cluster cluster);

  const Cluster& cluster() const { return cluster_; }
  int world_size() const { return world_; }
  int num_levels() const { return static_cast<int>(cluster_.levels.size()); }
  const Level& level(int i) const { return level_at(i); }

  // HybridEP Eq. 13: rank m -> (x_0, ..., x_{L-1}), x_i = floor(m / prod_{j>i} SF^j) mod SF^i,
  // where SF^i is level i's count; outermost first.
  std::vector<int> location(int rank) const;
  int rank_of(const std::vector<int>& location) const;

  // The outermost level at which the two ranks sit in different workers: its link is the one
  // their traffic crosses. kSameDevice when a == b.
  int meet_level(int a, int b) const;
  // The link of meet_level(a, b); throws Error for a == b (no link is crossed).
  const Level& link(int a, int b) const;

  // Number of ranks inside one worker of level i (1 for the innermost level).
  int ranks_per_worker(int level) const;
  // A level's bandwidth is its worker's (DESIGN.md: "the bandwidth one worker of that level
  // has to its peers"); every device of the worker crosses it at once in a collective over
  // all ranks, so each gets its share: bandwidth / ranks_per_worker(level).
  double device_bandwidth(int level) const {
    return level_at(level).bandwidth / ranks_per_worker(level);
  }
  // Ranks sharing rank's worker at `level` (e.g. level "node": the ranks of its node).
  std::vector<int> peers_within(int rank, int level) const;

 private:
  void check_rank(int rank) const;
  const Level& level_at(int i) const { return cluster_.levels.at(i); }

  Cluster cluster_;
  int world_ = 1;
  std::vector<int> stride_;  // stride_[i] = prod_{j>i} SF^j
};

// The per-level worker counts a group of ranks spans (levels with one worker dropped),
// outermost first, and their level indices; nullopt when the group is not a full sub-grid of
// the levels.
struct GroupSpan {
  std::vector<int> levels;  // level index
  std::vector<int> counts;  // distinct workers of that level in the group
};
std::optional<GroupSpan> group_span(const Topology& topology, const std::vector<int>& group);

}  // namespace moecomm::core
