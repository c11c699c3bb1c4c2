#include "core/topology.h"

#include <set>
#include <string>

#include "core/error.h"

namespace moecomm::core {

Topology::Topology(Cluster cluster) : cluster_(std::move(cluster)) {
  if (cluster_.levels.empty()) throw Error("topology", "a cluster needs at least one level");
  const int n = num_levels();
  stride_.assign(n, 1);
  for (int i = n - 2; i >= 0; --i) stride_[i] = stride_[i + 1] * cluster_.levels[i + 1].count;
  world_ = stride_[0] * cluster_.levels[0].count;
}

void Topology::check_rank(int rank) const {
  if (rank < 0 || rank >= world_)
    throw Error("topology", "rank " + std::to_string(rank) + " out of range [0, " +
                                std::to_string(world_) + ")");
}

std::vector<int> Topology::location(int rank) const {
  check_rank(rank);
  std::vector<int> loc(num_levels());
  for (int i = 0; i < num_levels(); ++i) loc[i] = (rank / stride_[i]) % cluster_.levels[i].count;
  return loc;
}

int Topology::rank_of(const std::vector<int>& loc) const {
  if (static_cast<int>(loc.size()) != num_levels())
    throw Error("topology", "location has " + std::to_string(loc.size()) + " levels, cluster has " +
                                std::to_string(num_levels()));
  int rank = 0;
  for (int i = 0; i < num_levels(); ++i) {
    if (loc[i] < 0 || loc[i] >= cluster_.levels[i].count)
      throw Error("topology", "location index " + std::to_string(loc[i]) +
                                  " out of range at level " + cluster_.levels[i].name);
    rank += loc[i] * stride_[i];
  }
  return rank;
}

int Topology::meet_level(int a, int b) const {
  check_rank(a);
  check_rank(b);
  for (int i = 0; i < num_levels(); ++i)
    if (a / stride_[i] != b / stride_[i]) return i;
  return kSameDevice;
}

const Level& Topology::link(int a, int b) const {
  int lvl = meet_level(a, b);
  if (lvl == kSameDevice)
    throw Error("topology", "rank " + std::to_string(a) + " and itself cross no link");
  return cluster_.levels[lvl];
}

int Topology::ranks_per_worker(int level) const {
  return stride_.at(level);
}

std::vector<int> Topology::peers_within(int rank, int level) const {
  check_rank(rank);
  const int size = stride_.at(level);
  const int first = rank / size * size;
  std::vector<int> peers(size);
  for (int i = 0; i < size; ++i) peers[i] = first + i;
  return peers;
}

std::optional<GroupSpan> group_span(const Topology& topo, const std::vector<int>& group) {
  GroupSpan span;
  long long product = 1;
  for (int l = 0; l < topo.num_levels(); ++l) {
    std::set<int> workers;
    for (int r : group) workers.insert(topo.location(r)[l]);
    if (workers.size() <= 1) continue;
    span.levels.push_back(l);
    span.counts.push_back(static_cast<int>(workers.size()));
    product *= static_cast<long long>(workers.size());
  }
  if (product != static_cast<long long>(group.size())) return std::nullopt;
  return span;
}

}  // namespace moecomm::core
