#pragma once
// The cluster as links of the flow network (DESIGN.md: "a level's link is the bandwidth and
// latency one worker of that level has to its peers at that level"): every worker of every
// level (datacenter, node, device) has an egress and an ingress link of its level's
// bandwidth, full duplex. Traffic between two ranks crosses the link of the level where
// they meet: out of the source's worker there, into the destination's.
#include <vector>

#include "core/topology.h"
#include "sim/flow_network.h"

namespace moecomm::sim {

class NetworkModel {
 public:
  // Adds the links to `network` (which must outlive this model's use).
  NetworkModel(const core::Topology& topology, FlowNetwork& network);

  // Level where a and b meet (outermost level at which they sit in different workers);
  // -1 when a == b.
  int meet_level(int a, int b) const;
  // {egress of a's worker, ingress of b's worker} at meet_level(a, b); a != b.
  std::vector<int> path(int a, int b) const;
  // Latency of that path: the meet level's latency (paid once, on the egress link).
  double latency(int a, int b) const;
  // LogGP's o of a message from a to b: the meet level's overhead, paid by the sender and
  // again by the receiver.
  double overhead(int a, int b) const;
  bool has_overhead() const { return has_overhead_; }
  // The level of an egress link; -1 for ingress links and links of other models.
  int egress_level(int link) const;
  // Identifies the path: flows with equal keys share their whole path.
  long long path_key(int a, int b) const;

 private:
  const core::Topology& topology_;
  std::vector<int> per_worker_;    // ranks per worker, per level
  std::vector<int> first_egress_;  // per level: link id of worker 0's egress
  int end_ = 0;                    // one past the last link this model added
  bool has_overhead_ = false;      // some level charges a per-message overhead
};

}  // namespace moecomm::sim
