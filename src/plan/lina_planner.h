#pragma once
// Lina's training-side planners (Lina Sec. 4, 6.1, 7.2): the size of the gradient AllReduce
// micro-ops, expert packing, and an estimate of one MoE layer's backward time when the
// backward A2As fair-share the network with a concurrent AllReduce (baseline) or go first
// (Lina). Units: bytes, seconds, bytes/s, flop/s.
#include <optional>
#include <vector>

#include "cost/alpha_beta.h"

namespace moecomm::plan {

// Lina Sec. 7.1: "a tensor partition size of 30MB". Sec. 7.2.2: below 10 MB per-micro-op
// overhead dominates; beyond 50 MB the step time grows.
inline constexpr double kLinaDefaultPartitionBytes = 30e6;
inline constexpr double kLinaMinPartitionBytes = 10e6;
inline constexpr double kLinaMaxPartitionBytes = 50e6;

// Ring AllReduce over `ranks` as an alpha-beta line in bytes: 2 (ranks - 1) steps of
// `latency`, each rank sending 2 (ranks - 1) / ranks of the tensor at `bandwidth`. One rank:
// nothing to do (0, 0). Throws moecomm::Error on ranks < 1, bandwidth <= 0, latency < 0.
cost::AlphaBeta lina_allreduce_line(int ranks, double bandwidth, double latency);

struct LinaPartitionInput {
  cost::AlphaBeta allreduce;  // the gradient AllReduce (e.g. lina_allreduce_line)
  // Compute window between the two backward A2As of a MoE layer (its expert FFN backward),
  // where Lina starts AllReduce micro-ops (Sec. 4.2); unset: unknown.
  std::optional<double> gap_seconds;
  double min_bytes = kLinaMinPartitionBytes;
  double max_bytes = kLinaMaxPartitionBytes;
};
// The paper takes the size as a hyperparameter (Sec. 6.1) and finds many good values as long
// as the time A2A is blocked is minimal (Sec. 7.2.2). Our rule: the largest micro-op whose
// AllReduce fits in the gap, so a micro-op started there is done before the next A2A arrives
// and never delays it; clamped to [min_bytes, max_bytes]. Unknown gap: 30 MB, clamped.
double lina_partition_bytes(const LinaPartitionInput& in);

struct LinaMicroOps {
  long long count = 0;
  double bytes_each = 0.0;
};
// One gradient tensor cut into equal chunks of at most partition_bytes (Lina Sec. 4.2 "equal-
// sized small chunks"; Sec. 6.1: torch `chunk`, never mixing two gradients in a micro-op).
LinaMicroOps lina_partition(double tensor_bytes, double partition_bytes);

// ---- Expert packing (Lina Sec. 4.2, 6.1) ----

struct LinaLinkLevel {
  int count = 0;           // workers of this level in one worker of the level above
  double bandwidth = 0.0;  // bytes/s of one device's traffic across this level's link
  double latency = 0.0;    // seconds
};

// One A2A of `bytes` per device inside a group of `group` consecutive ranks on `levels`
// (outermost first). A peer whose location first differs at level l is reached over level
// l's link; each peer gets bytes / group. Links of different levels work at once, so the
// time is the slowest level: max_l (latency_l + bytes_l / bandwidth_l) over levels with
// traffic. Throws moecomm::Error unless group divides the ranks and, at every level, the
// group and a level's worker size divide one another (so the group is aligned).
double lina_a2a_seconds(double bytes, int group, const std::vector<LinaLinkLevel>& levels);

struct LinaPackingInput {
  int experts = 0;                    // E of one MoE layer
  int ep = 0;                         // devices of the EP group before packing (E % ep == 0)
  std::vector<LinaLinkLevel> levels;  // the cluster; EP groups are consecutive ranks
  double microop_bytes = 0.0;         // one A2A micro-op per device (same size as AllReduce
                                      // micro-ops, Lina Fig. 8; the whole A2A if smaller)
  double token_bytes = 0.0;           // one routed token row: hidden * dtype bytes
  double ffn_flops_per_token = 0.0;   // one expert FFN on one row: 4 * hidden * ffn_hidden
  double flops = 0.0;                 // achieved flop/s of a device
  int max_experts_per_device = 0;     // memory cap; 0 = none
};

struct LinaPackingStep {
  int experts_per_device = 0;
  int ep_group = 0;  // E / experts_per_device devices exchange tokens
  double ffn_seconds = 0.0;
  double a2a_seconds = 0.0;
};

struct LinaPacking {
  int experts_per_device = 0;
  int ep_group = 0;
  std::vector<LinaPackingStep> steps;  // every size tried, in order; the last is chosen
};

// Lina Sec. 4.2: "starting with one expert per device, it iteratively increases the number of
// experts per device in powers of two, until the FFN computation exceeds that of the
// all-to-all micro-op". We start at E / ep and stop at the first size whose FFN micro-op takes
// at least as long as its A2A micro-op, or when doubling again would exceed E, the memory cap,
// or give a group not aligned with the levels. Packing k experts per device shrinks the EP
// group to E / k and replicates it (more data parallelism): a device still receives the rows
// of one A2A micro-op (microop_bytes / token_bytes) to compute, but fewer of them cross slow
// links (Lina Sec. 7.2.1: 8 experts on 2 nodes of 4 GPUs, packed 2 per device, avoid inter-
// node A2A).
LinaPacking lina_pack_experts(const LinaPackingInput& in);

// ---- Backward of one MoE layer (Lina Sec. 2.2, 4.1, Fig. 5, 7, 8a) ----

// The layer's backward on the compute stream: A2A, expert FFN backward, A2A. AllReduce work
// of earlier gradients is pending when the first A2A starts (Lina Fig. 5). The paper gives no
// formula; ours:
//  - fair share: while an A2A and the AllReduce both run, each gets half the bandwidth (a
//    fluid model; Lina Fig. 3 measures a median 1.83x A2A slowdown); during the FFN the
//    AllReduce runs alone.
//  - A2A first: A2As always get the full bandwidth; AllReduce micro-ops start back to back
//    only in the FFN gap, and an A2A cannot preempt a running micro-op, so the second A2A
//    waits for the one in flight (Lina Sec. 4.1: NCCL primitives cannot be preempted).
// Neither counts Lina's A2A/FFN micro-op pipelining, so both are upper bounds.
struct LinaBackwardInput {
  double a2a_seconds = 0.0;  // one backward A2A alone on the network
  double ffn_seconds = 0.0;  // expert FFN backward between the two A2As
  // Pending AllReduce micro-ops, in order, each as long as it takes alone on the network.
  std::vector<double> allreduce_microop_seconds;
};

struct LinaBackwardTimes {
  double layer_seconds = 0.0;           // first A2A start to second A2A end
  double a2a_blocked_seconds = 0.0;     // layer_seconds - ffn_seconds: compute waits on A2A
  double allreduce_left_seconds = 0.0;  // AllReduce work (alone on the network) still pending
};

LinaBackwardTimes lina_backward_fair_share(const LinaBackwardInput& in);
LinaBackwardTimes lina_backward_a2a_first(const LinaBackwardInput& in);

}  // namespace moecomm::plan
