#pragma once
// Runs a schedule (sched::Schedule) in virtual time on a cluster's topology (DESIGN.md "One
// schedule, three executors"): compute ops take flops / (the device's peak for the schedule's
// compute dtype x its compute efficiency) (or memory bytes / memory
// bandwidth, whichever is longer), at the device's overlapped_compute_share of that rate
// while a communication op of their rank is in flight (ready, not done); collectives and
// send/recv become flows on the flow-level network (flow_network.h), decomposed by their
// algorithm (collective_flows.h).
#include <optional>
#include <string>
#include <vector>

#include "core/topology.h"
#include "sched/schedule.h"

namespace moecomm::sim {

struct OpTiming {
  double start = 0;  // seconds
  double end = 0;
  // A collective member of priority >= 0 that became ready while a Lina micro-op ran on its
  // rank: when that ended and the rank entered the call (it waited outside); 0 otherwise.
  double gated_until = 0;
};

struct LinkUsage {
  std::string name;   // e.g. "node[3].egress"
  double bytes = 0;   // carried over the run
  double busy_s = 0;  // time with at least one flow on it
};

struct SimResult {
  std::vector<OpTiming> ops;             // indexed by OpId
  std::vector<double> rank_end_s;        // per rank: when its last op ends
  double makespan_s = 0;                 // max over ranks
  std::vector<LinkUsage> busiest_links;  // by bytes, most first (at most 16)
  int64_t flows = 0;                     // flows the network carried
  // Bytes sent over each level's links (egress side), outermost level first: what the
  // runtime's traffic counters measure by link level (all collectives, not only A2As).
  std::vector<double> bytes_by_level;
};

using core::Fairness;

struct SimOptions {
  // How concurrent collectives share a link (weighted max-min for per-collective); nullopt:
  // the cluster's (core::Cluster::fairness).
  std::optional<Fairness> fairness;
  // The share of its dtype's peak flop/s a compute op reaches, in place of the device's
  // compute_efficiency (core::Device); nullopt: the device's.
  std::optional<double> compute_efficiency;
  // FlowNetwork's completion tolerance, in [0, 0.1]: a flow with at most this share of its
  // bytes left may end up to this share of its transfer time early, together with a
  // near-simultaneous one. Uneven (routed) all-to-alls end one pair at a time, and this joins
  // those ends into far fewer rate refills; the iteration time moves by less than this share
  // (under half of it on routed steps: flow_network_test.cpp). 0: exact times.
  double completion_tolerance = 5e-3;
};

// Throws Error when the schedule does not fit the topology (world sizes differ) or is invalid.
SimResult simulate(const sched::Schedule& schedule, const core::Topology& topology,
                   const SimOptions& options = {});

}  // namespace moecomm::sim
