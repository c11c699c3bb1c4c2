#pragma once
// `moecomm sim --collective NAME --sizes LO:HI`: the cluster's prediction of one collective
// over a sweep of sizes, printed as nccl-tests prints its measurements (size, time, algbw,
// busbw), so the two tables can be put side by side.
#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/topology.h"
#include "sim/collective_bench.h"

namespace moecomm::cli {

// "1M:4G" (LO:HI, doubling as nccl-tests -f 2) or one size "64M"; sizes as parse_size reads
// them (K/M/G powers of 1024), at most 1 TiB. Throws Error naming `flag`.
std::vector<int64_t> parse_size_sweep(const std::string& text, const std::string& flag);

struct CollectiveSweep {
  std::string collective;  // "alltoall", ...
  std::string cluster;     // the cluster's name
  std::vector<int> group;  // global ranks
  std::vector<sim::CollectiveRun> rows;
};

CollectiveSweep run_collective_sweep(const core::Topology& topology, const std::string& collective,
                                     const std::vector<int>& group,
                                     const std::vector<int64_t>& sizes,
                                     const sim::SimOptions& options);

// nccl-tests' layout: a header naming the columns and units, a row per size, the average bus
// bandwidth.
void print_collective_sweep(const CollectiveSweep& sweep, std::ostream& out);
nlohmann::json collective_sweep_json(const CollectiveSweep& sweep);

}  // namespace moecomm::cli
