#include "cost/collective_model.h"

#include <algorithm>

#include "core/error.h"

namespace moecomm::cost {

std::string collective_name(Collective op) {
  switch (op) {
    case Collective::kAllToAll:
      return "alltoall";
    case Collective::kAllGather:
      return "allgather";
    case Collective::kReduceScatter:
      return "reducescatter";
    case Collective::kAllReduce:
      return "allreduce";
  }
  return "?";
}

CollectiveModel::CollectiveModel(const core::Topology& topology) : topology_(topology) {
  const auto& cluster = topology.cluster();
  for (int l = 0; l < topology.num_levels(); ++l)
    for (Collective op : {Collective::kAllToAll, Collective::kAllGather, Collective::kReduceScatter,
                          Collective::kAllReduce}) {
      const std::string& level = topology.level(l).name;
      curves_.emplace(std::pair{l, op}, EfficiencyCurve(cluster.curve(level, collective_name(op)),
                                                        cluster.name + ": efficiency." + level));
    }
}

double CollectiveModel::efficiency(Collective op, int level, double n) const {
  return curves_.at({level, op}).at(n);
}

AlphaBeta CollectiveModel::line(Collective op, int level, int p, double n_ref) const {
  if (p < 1) throw Error("collective model", "group size must be at least 1");
  if (p == 1) return {};  // nothing leaves the device
  const core::Level& link = topology_.level(level);
  const double bw = topology_.device_bandwidth(level) * efficiency(op, level, n_ref);
  const double steps = p - 1, share = (p - 1.0) / p;
  // LogGP: a message costs its sender and its receiver the level's overhead o each.
  const double message = 2 * link.overhead;
  switch (op) {
    case Collective::kAllToAll:  // p - 1 messages of n / p each, in flight together
      return {link.latency + steps * message, share / bw};
    case Collective::kAllGather:
    case Collective::kReduceScatter:  // ring: p - 1 steps of n / p
      return {steps * (link.latency + message), share / bw};
    case Collective::kAllReduce:  // ring ReduceScatter + AllGather
      return {2 * steps * (link.latency + message), 2 * share / bw};
  }
  return {};
}

int CollectiveModel::bottleneck_level(const std::vector<int>& group) const {
  int level = core::Topology::kSameDevice;
  for (size_t i = 1; i < group.size(); ++i) {
    int l = topology_.meet_level(group[0], group[i]);
    if (l != core::Topology::kSameDevice && (level == core::Topology::kSameDevice || l < level))
      level = l;
  }
  return level;
}

double CollectiveModel::group_time(Collective op, const std::vector<int>& group, double n) const {
  int level = bottleneck_level(group);
  if (level == core::Topology::kSameDevice) return 0.0;
  return time(op, level, static_cast<int>(group.size()), n);
}

std::vector<double> CollectiveModel::alltoall_level_shares(const std::vector<int>& group) const {
  std::vector<double> share(topology_.num_levels(), 0.0);
  if (group.empty()) return share;
  for (size_t i = 1; i < group.size(); ++i)
    share[topology_.meet_level(group[0], group[i])] += 1.0 / group.size();
  return share;
}

double CollectiveModel::alltoall_time(const std::vector<int>& group, double n) const {
  const auto share = alltoall_level_shares(group);
  double worst = 0.0, overheads = 0.0;
  for (int l = 0; l < topology_.num_levels(); ++l) {
    if (share[l] == 0.0) continue;
    // The messages of every level are in flight together, each paying the level's latency
    // once; the link's efficiency is read at the rank's whole send volume, as MoNTA reads r1
    // at I / (N t).
    const double bw = topology_.device_bandwidth(l) * efficiency(Collective::kAllToAll, l, n);
    worst = std::max(worst, topology_.level(l).latency + share[l] * n / bw);
    // LogGP: the rank sends one message to each peer and receives one from each, paying o
    // for each, one after another.
    const int peers = static_cast<int>(share[l] * group.size() + 0.5);
    overheads += 2 * peers * topology_.level(l).overhead;
  }
  return worst + overheads;
}

}  // namespace moecomm::cost
