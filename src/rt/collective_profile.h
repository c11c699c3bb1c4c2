#pragma once
// `moecomm profile`'s microbenchmark: A2A, AllGather, ReduceScatter and AllReduce over a sweep
// of sizes, per level, through this runtime's own collectives (collectives.h), so it measures
// what the runtime uses. A level's link is what one worker has to its peers there (DESIGN.md),
// so each level is measured over one representative rank per worker.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/rank_groups.h"
#include "cost/profile_fit.h"

namespace moecomm::rt {

struct ProfileGroup {
  std::string level;
  core::RankGroup ranks;  // global ranks, one per worker of the level
};

// The levels of `world` ranks, `ranks_per_node` per node, nodes split evenly over
// `datacenters`; outermost first, levels of a single worker left out:
//   datacenter: the first rank of each datacenter;
//   node: local rank 0 of each node of datacenter 0;
//   gpu: the ranks of node 0.
// Throws moecomm::Error (naming the flag) when the sizes do not divide or no level has 2 workers.
std::vector<ProfileGroup> profile_groups(int world, int ranks_per_node, int datacenters);

struct ProfileSweep {
  std::vector<int64_t> sizes;  // nccl-tests sizes (cost/profile_fit.h)
  int max_iters = 20;          // timed iterations per point, at most
  int min_iters = 3;           // and at least (or max_iters when lower)
  int warmup = 2;              // untimed iterations first, at most
  // Repetitions stop once a point's timed iterations (or its warm-up) took this long, so large
  // sizes on slow links run only min_iters times.
  double point_budget_s = 0.25;
  double timeout_s = 60;  // per collective call
};

// The size measured for a requested one over `ranks`: a whole number of fp32 elements per
// member block (at least one), as ReduceScatter's and A2A's equal blocks need.
int64_t profile_bytes(int64_t size, int ranks);

// What runs for `bytes`: the MPI call behind the runtime's collective ("mpi-ialltoallv", ...),
// or "ring" for an AllReduce from kRingAllReduceBytes on (rt/collectives.h).
std::string profile_algorithm(cost::Collective op, int64_t bytes);

// Collective over MPI_COMM_WORLD: every rank passes the same arguments. Members of each group
// run the sweep over it (time of a point = median over iterations of the slowest member); the
// other ranks wait. Returns the same rows on every rank: per group, per collective, per size.
// `on_row` is called on each group's first member after each point (progress).
std::vector<cost::ProfileRow> profile_collectives(
    const std::vector<ProfileGroup>& groups, const ProfileSweep& sweep,
    const std::function<void(const cost::ProfileRow&)>& on_row = {});

}  // namespace moecomm::rt
