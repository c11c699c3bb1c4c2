#include "plan/lina_planner.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>

#include "core/error.h"

namespace moecomm::plan {
namespace {

const char* const kWhere = "lina planner";

void require(bool ok, const std::string& why) {
  if (!ok) throw Error(kWhere, why);
}

bool non_negative(double x) {
  return std::isfinite(x) && x >= 0;
}
bool positive(double x) {
  return std::isfinite(x) && x > 0;
}

void check_levels(const std::vector<LinaLinkLevel>& levels) {
  require(!levels.empty(), "at least one level is needed");
  for (std::size_t l = 0; l < levels.size(); ++l) {
    const std::string at = "level " + std::to_string(l) + ": ";
    require(levels[l].count >= 1, at + "count must be >= 1");
    require(positive(levels[l].bandwidth), at + "bandwidth must be positive");
    require(non_negative(levels[l].latency), at + "latency must be >= 0");
  }
}

// ranks_inside[l]: ranks under level l's workers taken together (prod_{j>=l} count_j); [L] = 1.
std::vector<long long> ranks_inside(const std::vector<LinaLinkLevel>& levels) {
  std::vector<long long> inside(levels.size() + 1, 1);
  for (std::size_t l = levels.size(); l-- > 0;) inside[l] = inside[l + 1] * levels[l].count;
  return inside;  // inside[0] also counts level 0's workers: the whole cluster
}

// A group of consecutive ranks lines up with every worker boundary.
bool aligned(long long group, const std::vector<LinaLinkLevel>& levels) {
  for (long long w : ranks_inside(levels))
    if (group % w != 0 && w % group != 0) return false;
  return ranks_inside(levels)[0] % group == 0;
}

void check_backward(const LinaBackwardInput& in) {
  require(non_negative(in.a2a_seconds), "A2A seconds must be >= 0");
  require(non_negative(in.ffn_seconds), "FFN seconds must be >= 0");
  for (double op : in.allreduce_microop_seconds)
    require(positive(op), "every AllReduce micro-op must take positive time");
}

// Fair share of one A2A with the pending AllReduce work r (both in seconds alone on the
// network): at half bandwidth each until one ends. Returns the A2A's duration; updates r.
double fair_share_a2a(double a2a, double& r) {
  if (r >= a2a) {
    r -= a2a;
    return 2.0 * a2a;
  }
  const double t = a2a + r;  // 2r shared, then a2a - r alone
  r = 0.0;
  return t;
}

}  // namespace

cost::AlphaBeta lina_allreduce_line(int ranks, double bandwidth, double latency) {
  require(ranks >= 1, "AllReduce ranks must be >= 1, got " + std::to_string(ranks));
  require(positive(bandwidth), "AllReduce bandwidth must be positive");
  require(non_negative(latency), "AllReduce latency must be >= 0");
  if (ranks == 1) return {0.0, 0.0};
  const double steps = 2.0 * (ranks - 1);
  return {steps * latency, steps / ranks / bandwidth};
}

double lina_partition_bytes(const LinaPartitionInput& in) {
  require(non_negative(in.allreduce.alpha) && non_negative(in.allreduce.beta),
          "AllReduce alpha and beta must be >= 0");
  require(positive(in.min_bytes), "min partition bytes must be positive");
  require(std::isfinite(in.max_bytes) && in.max_bytes >= in.min_bytes,
          "max partition bytes must be >= min partition bytes");
  if (!in.gap_seconds) return std::clamp(kLinaDefaultPartitionBytes, in.min_bytes, in.max_bytes);
  require(non_negative(*in.gap_seconds), "gap seconds must be >= 0");
  // Largest micro-op whose AllReduce ends inside the gap (cost::AlphaBeta::inverse).
  return std::clamp(in.allreduce.inverse(*in.gap_seconds), in.min_bytes, in.max_bytes);
}

LinaMicroOps lina_partition(double tensor_bytes, double partition_bytes) {
  require(non_negative(tensor_bytes), "tensor bytes must be >= 0");
  require(positive(partition_bytes), "partition bytes must be positive");
  if (tensor_bytes == 0) return {};
  require(tensor_bytes / partition_bytes <= 1e12, "more than 1e12 micro-ops: partition too small");
  const auto count = static_cast<long long>(std::ceil(tensor_bytes / partition_bytes));
  return {count, tensor_bytes / count};
}

double lina_a2a_seconds(double bytes, int group, const std::vector<LinaLinkLevel>& levels) {
  check_levels(levels);
  require(non_negative(bytes), "A2A bytes must be >= 0");
  require(group >= 1, "A2A group must be >= 1, got " + std::to_string(group));
  require(aligned(group, levels),
          "A2A group of " + std::to_string(group) + " ranks does not line up with the levels");
  const std::vector<long long> inside = ranks_inside(levels);
  const long long g = group;
  double slowest = 0.0;
  for (std::size_t l = 0; l < levels.size(); ++l) {
    // Peers sharing our level l-1 worker but not our level l worker use level l's link.
    const long long peers = std::min(g, inside[l]) - std::min(g, inside[l + 1]);
    if (peers == 0) continue;
    const double level_bytes = bytes / g * peers;
    slowest = std::max(slowest, levels[l].latency + level_bytes / levels[l].bandwidth);
  }
  return slowest;
}

LinaPacking lina_pack_experts(const LinaPackingInput& in) {
  require(in.experts >= 1, "experts must be >= 1");
  require(in.ep >= 1 && in.experts % in.ep == 0, "ep must be >= 1 and divide the experts");
  require(positive(in.microop_bytes), "micro-op bytes must be positive");
  require(positive(in.token_bytes), "token bytes must be positive");
  require(positive(in.ffn_flops_per_token), "FFN flops per token must be positive");
  require(positive(in.flops), "device flops must be positive");
  int per_device = in.experts / in.ep;
  require(in.max_experts_per_device == 0 || in.max_experts_per_device >= per_device,
          "max experts per device must be 0 (none) or >= experts / ep");

  // A device computes the rows of one A2A micro-op, however many experts it hosts.
  const double ffn = in.microop_bytes / in.token_bytes * in.ffn_flops_per_token / in.flops;
  LinaPacking out;
  for (;;) {
    const int group = in.experts / per_device;
    out.steps.push_back(
        {per_device, group, ffn, lina_a2a_seconds(in.microop_bytes, group, in.levels)});
    if (ffn >= out.steps.back().a2a_seconds) break;  // FFN micro-op covers the A2A micro-op
    const int next = 2 * per_device;
    if (next > in.experts || in.experts % next != 0) break;
    if (in.max_experts_per_device > 0 && next > in.max_experts_per_device) break;
    if (!aligned(in.experts / next, in.levels)) break;
    per_device = next;
  }
  out.experts_per_device = out.steps.back().experts_per_device;
  out.ep_group = out.steps.back().ep_group;
  return out;
}

LinaBackwardTimes lina_backward_fair_share(const LinaBackwardInput& in) {
  check_backward(in);
  double r = std::accumulate(in.allreduce_microop_seconds.begin(),
                             in.allreduce_microop_seconds.end(), 0.0);
  double t = fair_share_a2a(in.a2a_seconds, r);
  t += in.ffn_seconds;  // the AllReduce runs alone meanwhile
  r -= std::min(r, in.ffn_seconds);
  t += fair_share_a2a(in.a2a_seconds, r);
  return {t, t - in.ffn_seconds, r};
}

LinaBackwardTimes lina_backward_a2a_first(const LinaBackwardInput& in) {
  check_backward(in);
  const std::vector<double>& ops = in.allreduce_microop_seconds;
  // Micro-ops start back to back while the FFN runs; the last one started may overrun it.
  double busy = 0.0;
  std::size_t next = 0;
  while (next < ops.size() && busy < in.ffn_seconds) busy += ops[next++];
  const double gap = std::max(in.ffn_seconds, busy);
  const double t = in.a2a_seconds + gap + in.a2a_seconds;
  const double left =
      std::accumulate(ops.begin() + static_cast<std::ptrdiff_t>(next), ops.end(), 0.0);
  return {t, t - in.ffn_seconds, left};
}

}  // namespace moecomm::plan
