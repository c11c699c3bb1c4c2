#pragma once
// Alpha-beta time of collectives per level of a topology, with LogGP's per-message overhead o
// at the sender and the receiver (as the simulator charges them). Ring algorithms for
// AllGather, ReduceScatter and AllReduce (each step: latency + 2o); pairwise exchange for
// AllToAll, where all messages are in flight at once (one latency) and each level's link
// carries its share concurrently (the slowest level bounds the time), plus 2o per peer. A level's
// bandwidth is shared by the devices of its worker (Topology::device_bandwidth), and its measured
// efficiency curve (MoNTA's r(volume)) scales it.
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/topology.h"
#include "cost/alpha_beta.h"
#include "cost/efficiency_curve.h"

namespace moecomm::cost {

enum class Collective { kAllToAll, kAllGather, kReduceScatter, kAllReduce };

std::string collective_name(Collective op);  // the efficiency-curve key: "alltoall", ...

class CollectiveModel {
 public:
  explicit CollectiveModel(const core::Topology& topology);

  // Alpha-beta line of `op` over p ranks joined by `level`'s link, in bytes of
  // `n` = the per-rank send buffer (AllToAll), the gathered output (AllGather), the input
  // (ReduceScatter) or the buffer (AllReduce). Efficiency taken at n_ref bytes.
  AlphaBeta line(Collective op, int level, int p, double n_ref) const;
  double time(Collective op, int level, int p, double n) const {
    return line(op, level, p, n).time(n);
  }

  // The outermost level any two members of `group` meet at (kSameDevice for one member).
  int bottleneck_level(const std::vector<int>& group) const;
  // Ring collectives over a group run at its bottleneck link.
  double group_time(Collective op, const std::vector<int>& group, double n) const;
  // AllToAll over a group with uniform traffic: every level carries its members' share at
  // the same time; returns the time of the slowest level.
  double alltoall_time(const std::vector<int>& group, double n) const;
  // The share of a uniform AllToAll's bytes that crosses each level (index = level).
  std::vector<double> alltoall_level_shares(const std::vector<int>& group) const;

  const core::Topology& topology() const { return topology_; }
  // The measured efficiency of `op` at `level` for n bytes (1 where nothing was measured).
  double efficiency(Collective op, int level, double n) const;

 private:
  const core::Topology& topology_;
  std::map<std::pair<int, Collective>, EfficiencyCurve> curves_;  // built once from the cluster
};

}  // namespace moecomm::cost
