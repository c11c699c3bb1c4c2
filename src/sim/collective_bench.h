#pragma once
// One collective alone on the cluster, as nccl-tests runs it (`moecomm sim --collective`):
// a one-collective schedule simulated like any other, reported as nccl-tests reports it
// (doc/PERFORMANCE.md of NVIDIA/nccl-tests): size S in bytes, time, algbw = S / time and
// busbw = algbw x the collective's bus factor.
#include <string>
#include <vector>

#include "core/topology.h"
#include "sched/schedule.h"
#include "sim/simulator.h"

namespace moecomm::sim {

// "alltoall", "allreduce", "allgather" or "reducescatter" (core::known_collectives' names);
// throws Error naming `where` otherwise.
sched::OpKind parse_collective(const std::string& name, const std::string& where);
std::string collective_key(sched::OpKind kind);  // the inverse

// nccl-tests' bus bandwidth factor over n ranks: AllReduce 2(n-1)/n; AllGather,
// ReduceScatter and AllToAll (n-1)/n.
double bus_factor(sched::OpKind kind, int n);

// The schedule of one collective of nccl-tests' size S over `group` (global ranks of a world
// of `world` ranks): the AllReduce's buffer, the AllGather's output, the ReduceScatter's
// input, or the A2A's per-rank send buffer (S / n to every member, itself included, as
// alltoall_perf sends). A2A: flat, as NCCL's point-to-point all-to-all.
sched::Schedule collective_schedule(sched::OpKind kind, const std::vector<int>& group, int world,
                                    double bytes);

struct CollectiveRun {
  double bytes = 0;   // S
  double time_s = 0;  // the collective's simulated time
  double algbw = 0;   // bytes/s: S / time
  double busbw = 0;   // bytes/s: algbw x bus_factor
};

CollectiveRun simulate_collective(const core::Topology& topology, sched::OpKind kind,
                                  const std::vector<int>& group, double bytes,
                                  const SimOptions& options = {});

}  // namespace moecomm::sim
