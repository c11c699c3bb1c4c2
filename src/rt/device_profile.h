#pragma once
// `moecomm profile`'s device measurement. Every rank measures at the same time, so a rate is
// the rank's real share of the node (ranks share the CPU cores and the memory system).
#include <cstdint>

#include "core/cluster.h"

namespace moecomm::rt {

struct DeviceProbe {
  int gemm_size = 512;            // square fp32 GEMM (nn/gemm.h), an expert GEMM's order
  double seconds = 0.5;           // each measurement repeats for this long on every rank
  int64_t copy_bytes = 32 << 20;  // memcpy size, well past the caches
  int ranks_per_node = 1;         // memory per rank = the node's MemTotal / this
  double timeout_s = 60;          // a rank that never joins fails the job after this
};

struct DeviceProfile {
  double gemm_flops = 0;        // flop/s per rank, mean over the ranks
  double gemm_flops_min = 0;    // of the slowest rank
  double memory_bandwidth = 0;  // bytes copied per second per rank, mean over the ranks
  double memory_bytes = 0;      // per rank

  core::Device device() const { return {gemm_flops, memory_bytes, memory_bandwidth}; }
};

// Collective over MPI_COMM_WORLD. Throws moecomm::Error when /proc/meminfo cannot be read.
DeviceProfile profile_device(const DeviceProbe& probe);

}  // namespace moecomm::rt
