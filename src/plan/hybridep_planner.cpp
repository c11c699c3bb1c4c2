#include "plan/hybridep_planner.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "core/error.h"

namespace moecomm::plan {
namespace {

const char* const kWhere = "hybridep planner";

void require(bool ok, const std::string& why) {
  if (!ok) throw Error(kWhere, why);
}

void check_compute(const HybridEpCompute& c) {
  require(std::isfinite(c.pre_expert_seconds) && c.pre_expert_seconds >= 0,
          "pre-expert seconds must be >= 0");
  require(std::isfinite(c.expert_seconds) && c.expert_seconds >= 0, "expert seconds must be >= 0");
  require(c.experts_per_gpu >= 1, "experts per GPU must be >= 1");
}

void check_sizes(double data_bytes, double expert_bytes) {
  require(std::isfinite(data_bytes) && data_bytes > 0, "data bytes D must be positive");
  require(std::isfinite(expert_bytes) && expert_bytes > 0, "expert bytes P_E must be positive");
}

void check(const HybridEpStreamInput& in) {
  require(in.gpus >= 2, "G must be >= 2, got " + std::to_string(in.gpus));
  require(std::isfinite(in.bandwidth) && in.bandwidth > 0, "bandwidth B must be positive");
  check_sizes(in.data_bytes, in.expert_bytes);
  check_compute(in.compute);
}

void check(const HybridEpLayerInput& in) {
  require(!in.levels.empty(), "at least one level is needed");
  for (std::size_t l = 0; l < in.levels.size(); ++l) {
    const std::string at = "level " + std::to_string(l) + ": ";
    require(in.levels[l].count >= 1, at + "count must be >= 1");
    require(std::isfinite(in.levels[l].bandwidth) && in.levels[l].bandwidth > 0,
            at + "bandwidth must be positive");
  }
  check_sizes(in.data_bytes, in.expert_bytes);
  check_compute(in.compute);
}

void check_domains(const HybridEpLayerInput& in, const std::vector<int>& domain_sizes) {
  require(domain_sizes.size() == in.levels.size(), "one domain size per level is needed");
  for (std::size_t l = 0; l < domain_sizes.size(); ++l)
    require(domain_sizes[l] >= 1 && in.levels[l].count % domain_sizes[l] == 0,
            "level " + std::to_string(l) + ": domain size " + std::to_string(domain_sizes[l]) +
                " must be >= 1 and divide the count " + std::to_string(in.levels[l].count));
}

void check_domain(int gpus, int domain_size) {
  require(gpus >= 2, "G must be >= 2, got " + std::to_string(gpus));
  require(domain_size >= 1 && gpus % domain_size == 0,
          "domain size " + std::to_string(domain_size) +
              " must be >= 1 and divide G = " + std::to_string(gpus));
}

// Divisors of n, largest first.
std::vector<int> divisors(int n) {
  std::vector<int> d;
  for (int s = n; s >= 1; --s)
    if (n % s == 0) d.push_back(s);
  return d;
}

// Eq. 8 given the pieces: compute + (AG + 2 A2A) - (min(PE, AG) + n Ep).
void combine(const HybridEpCompute& c, double a2a, double ag, double& compute, double& overlap,
             double& total) {
  const double expert = c.experts_per_gpu * c.expert_seconds;
  compute = c.pre_expert_seconds + expert;                // Eq. 2
  overlap = std::min(c.pre_expert_seconds, ag) + expert;  // Eq. 7
  total = compute + (ag + 2.0 * a2a) - overlap;           // Eq. 8 with Eq. 5
}

// Recursive search over per-level divisors (hybridep_plan).
void search(const HybridEpLayerInput& in, std::vector<int>& sizes, std::size_t level,
            HybridEpPlan& best, bool& found) {
  if (level == in.levels.size()) {
    HybridEpLayerTimes t = hybridep_layer_times(in, sizes);
    if (!found || t.total_seconds < best.forward.total_seconds) {
      best.domain_sizes = sizes;
      best.forward = std::move(t);
      found = true;
    }
    return;
  }
  for (int s : divisors(in.levels[level].count)) {
    sizes[level] = s;
    search(in, sizes, level + 1, best, found);
  }
}

}  // namespace

HybridEpStreamTimes hybridep_stream_times(const HybridEpStreamInput& in, double p) {
  check(in);
  require(std::isfinite(p) && p >= 0 && p <= 1, "p must be in [0, 1]");
  const double g = in.gpus;
  HybridEpStreamTimes t;
  // Eq. 3 with Definition 1: of the G - 1 chunks of D / G, the share p goes by A2A.
  t.a2a_seconds = p * in.data_bytes * (g - 1) / g / in.bandwidth;
  // Eq. 4: the rest, (1 - p)(G - 1) chunks, became experts gathered from as many GPUs.
  t.allgather_seconds = (1 - p) * (g - 1) * in.expert_bytes / in.bandwidth;
  t.comm_seconds = t.allgather_seconds + 2.0 * t.a2a_seconds;  // Eq. 5
  combine(in.compute, t.a2a_seconds, t.allgather_seconds, t.compute_seconds, t.overlap_seconds,
          t.total_seconds);
  return t;
}

HybridEpCase hybridep_case2_kind(const HybridEpStreamInput& in) {
  check(in);
  // Sec. III-E after Eq. 12: the sign of 2D - G P_E decides the slope of Eq. 12 in p.
  return 2.0 * in.data_bytes - in.gpus * in.expert_bytes < 0 ? HybridEpCase::kCase2_1
                                                             : HybridEpCase::kCase2_2;
}

double hybridep_case_boundary(const HybridEpStreamInput& in) {
  check(in);
  // Eq. 11: Lat_PE >= (1 - p)(G - 1) P_E / B  <=>  p >= 1 - B Lat_PE / (P_E (G - 1)).
  return 1.0 - in.bandwidth * in.compute.pre_expert_seconds / (in.expert_bytes * (in.gpus - 1));
}

HybridEpCase hybridep_case_at(const HybridEpStreamInput& in, double p) {
  const HybridEpStreamTimes t = hybridep_stream_times(in, p);
  // Eq. 10: Case 1 while the AllGather fits under the pre-expert computation.
  if (in.compute.pre_expert_seconds >= t.allgather_seconds) return HybridEpCase::kCase1;
  return hybridep_case2_kind(in);
}

HybridEpOptimum hybridep_optimal_p(const HybridEpStreamInput& in) {
  HybridEpOptimum o;
  o.kind = hybridep_case2_kind(in);
  // Case 2.1: Eq. 12 falls with p up to p_b, Eq. 11 rises after it -> p_b. Case 2.2: both
  // rise with p -> 0. p_b < 0 means the whole range is Case 1 -> 0 as well.
  o.p = o.kind == HybridEpCase::kCase2_1 ? std::clamp(hybridep_case_boundary(in), 0.0, 1.0) : 0.0;
  o.region = hybridep_case_at(in, o.p);
  o.total_seconds = hybridep_stream_times(in, o.p).total_seconds;
  return o;
}

double hybridep_p_of_domain(int gpus, int domain_size) {
  check_domain(gpus, domain_size);
  return static_cast<double>(gpus - domain_size) / (gpus - 1);
}

double hybridep_a2a_share(int gpus, int domain_size) {
  check_domain(gpus, domain_size);
  return static_cast<double>(gpus - domain_size) / gpus;
}

HybridEpDomainChoice hybridep_best_domain(const HybridEpStreamInput& in) {
  check(in);
  HybridEpDomainChoice best;
  bool found = false;
  for (int s : divisors(in.gpus)) {  // largest first: ties keep the larger domain
    const double p = hybridep_p_of_domain(in.gpus, s);
    const double total = hybridep_stream_times(in, p).total_seconds;
    if (!found || total < best.total_seconds) best = {s, p, total};
    found = true;
  }
  return best;
}

HybridEpLayerTimes hybridep_layer_times(const HybridEpLayerInput& in,
                                        const std::vector<int>& domain_sizes) {
  check(in);
  check_domains(in, domain_sizes);
  HybridEpLayerTimes t;
  double gathered = 1.0;  // prod_{j<l} S^j: experts per original one after outer AllGathers
  for (std::size_t l = 0; l < in.levels.size(); ++l) {
    const double sf = in.levels[l].count, s = domain_sizes[l], b = in.levels[l].bandwidth;
    t.p.push_back(sf > 1 ? (sf - s) / (sf - 1) : 1.0);
    t.a2a_level_seconds.push_back(in.data_bytes * (sf - s) / sf / b);  // Eq. 3, G = SF^l
    t.allgather_level_seconds.push_back(in.expert_bytes * gathered * (s - 1) / b);  // Eq. 4
    t.a2a_seconds += t.a2a_level_seconds.back();
    t.allgather_seconds += t.allgather_level_seconds.back();
    gathered *= s;
  }
  combine(in.compute, t.a2a_seconds, t.allgather_seconds, t.compute_seconds, t.overlap_seconds,
          t.total_seconds);
  return t;
}

HybridEpPlan hybridep_plan(const HybridEpLayerInput& in) {
  check(in);
  HybridEpPlan best;
  std::vector<int> sizes(in.levels.size(), 1);
  bool found = false;
  search(in, sizes, 0, best, found);
  return best;
}

HybridEpLayerTimes hybridep_backward_times(const HybridEpLayerInput& forward,
                                           const HybridEpBackwardInput& backward,
                                           const std::vector<int>& domain_sizes) {
  require(std::isfinite(backward.expert_grad_bytes) && backward.expert_grad_bytes > 0,
          "expert gradient bytes must be positive");
  HybridEpLayerInput in = forward;
  in.expert_bytes = backward.expert_grad_bytes;  // ReduceScatter payload, AllGather's pairs
  in.compute = backward.compute;
  return hybridep_layer_times(in, domain_sizes);
}

}  // namespace moecomm::plan
