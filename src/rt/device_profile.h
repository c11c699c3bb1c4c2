#pragma once
// `moecomm profile`'s device measurement. Every rank measures at the same time, so a rate is
// the rank's real share of the node (ranks share the CPU cores and the memory system).
#include <algorithm>
#include <cstdint>
#include <optional>

#include "core/cluster.h"
#include "nn/moe_transformer.h"

namespace moecomm::rt {

// A model's training step (forward and backward, no optimizer) as the device's workload:
// FSMoE fits its compute model to micro-benchmarks of the layers it runs (Sec. 6.2); on CPU
// ranks a square GEMM's rate overstates what a step's many small and memory-bound ops reach.
struct ModelStepProbe {
  nn::MoeTransformerConfig model;  // experts: this rank's share (the layer runs them locally)
  int batch = 4, seq_len = 64;
  // Timed steps: at least `min_steps`, for at least `seconds` (a step of 8 CPU ranks on two
  // cores can take a second, and one step's time varies by 10%).
  double seconds = 3;
  int min_steps = 3;
  // What the simulator counts for one such step on one rank, per phase: each phase is timed
  // apart, as the simulator prices backward-phase compute at the device's backward rate.
  double forward_flops = 0, backward_flops = 0;
  // The steps are timed again while ring AllReduces of this size run back to back on a second
  // thread (rt/background_traffic.h): the time alone over the time beside them is the device's
  // overlapped_compute_share. 0: not measured.
  int64_t traffic_bytes = 1 << 20;
};

struct DeviceProbe {
  int gemm_size = 512;            // square fp32 GEMM (nn/gemm.h), an expert GEMM's order
  double seconds = 0.5;           // each measurement repeats for this long on every rank
  int64_t copy_bytes = 32 << 20;  // memcpy size, well past the caches
  int ranks_per_node = 1;         // memory per rank = the node's MemTotal / this
  double timeout_s = 60;          // a rank that never joins fails the job after this
  std::optional<ModelStepProbe> model_step;
};

struct DeviceProfile {
  double gemm_flops = 0;        // flop/s per rank, mean over the ranks
  double gemm_flops_min = 0;    // of the slowest rank
  double memory_bandwidth = 0;  // bytes copied per second per rank, mean over the ranks
  double memory_bytes = 0;      // per rank
  // With a model step probe: a phase's flops / its time in lockstep (every rank starts it
  // together; it ends when the slowest rank is done), the same on every rank.
  double model_forward_flops = 0, model_backward_flops = 0;
  // From each rank's own phase times: the slowest rank's rates.
  double model_forward_flops_min = 0, model_backward_flops_min = 0;
  // A lockstep step's time alone / beside background AllReduces, as measured (noise can put
  // it above 1); 1 when not measured. With it, the traffic's AllReduces.
  double overlapped_step_ratio = 1;
  int64_t traffic_calls = 0;

  double overlapped_compute_share() const { return std::min(1.0, overlapped_step_ratio); }

  // The device's flop/s: the model step's lockstep forward and backward rates when measured,
  // else the mean GEMM rate for both.
  core::Device device() const {
    if (model_forward_flops > 0)
      return {model_forward_flops, memory_bytes, memory_bandwidth, model_backward_flops,
              overlapped_compute_share()};
    return {gemm_flops, memory_bytes, memory_bandwidth, 0};
  }
};

// Collective over MPI_COMM_WORLD. Throws moecomm::Error when /proc/meminfo cannot be read.
DeviceProfile profile_device(const DeviceProbe& probe);

}  // namespace moecomm::rt
