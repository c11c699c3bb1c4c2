#include "plan/hybridep_domains.h"

#include <string>

#include "core/error.h"

namespace moecomm::plan {
namespace {

const char* const kWhere = "hybridep domains";

void check_levels(const std::vector<int>& level_counts, const std::vector<int>& domain_sizes) {
  if (level_counts.empty()) throw Error(kWhere, "at least one level is needed");
  if (level_counts.size() != domain_sizes.size())
    throw Error(kWhere, "one domain size per level is needed, got " +
                            std::to_string(domain_sizes.size()) + " for " +
                            std::to_string(level_counts.size()) + " levels");
  for (std::size_t l = 0; l < level_counts.size(); ++l) {
    const std::string at = "level " + std::to_string(l) + ": ";
    if (level_counts[l] < 1)
      throw Error(kWhere, at + "count must be >= 1, got " + std::to_string(level_counts[l]));
    if (domain_sizes[l] < 1 || level_counts[l] % domain_sizes[l] != 0)
      throw Error(kWhere, at + "domain size " + std::to_string(domain_sizes[l]) +
                              " must be >= 1 and divide the count " +
                              std::to_string(level_counts[l]));
  }
}

long long gpu_count(const std::vector<int>& level_counts) {
  long long g = 1;
  for (int c : level_counts) g *= c;
  return g;
}

// HybridEP Eq. 13: x_i = floor(m / prod_{j>i} SF^j) mod SF^i (x_{L-1} = m mod SF^{L-1}).
std::vector<int> location(long long m, const std::vector<int>& level_counts) {
  std::vector<int> loc(level_counts.size());
  for (std::size_t i = level_counts.size(); i-- > 0;) {
    loc[i] = static_cast<int>(m % level_counts[i]);
    m /= level_counts[i];
  }
  return loc;
}

}  // namespace

HybridEpComm hybridep_comm_type(const std::vector<int>& loc_m, const std::vector<int>& loc_n,
                                int level, int domain_size) {
  if (loc_m.size() != loc_n.size())
    throw Error(kWhere, "the two locations have different numbers of levels");
  if (level < 0 || level >= static_cast<int>(loc_m.size()))
    throw Error(kWhere, "level " + std::to_string(level) + " is outside the locations");
  if (domain_size < 1)
    throw Error(kWhere, "domain size must be >= 1, got " + std::to_string(domain_size));
  for (std::size_t i = 0; i < loc_m.size(); ++i)
    if (loc_m[i] < 0 || loc_n[i] < 0) throw Error(kWhere, "location coordinates must be >= 0");

  // Algorithm 1 line 8 (corrected, see header): every coordinate but `level` agrees.
  for (std::size_t i = 0; i < loc_m.size(); ++i)
    if (static_cast<int>(i) != level && loc_m[i] != loc_n[i]) return HybridEpComm::kNone;
  // Lines 5-7: worker index at this level, its domain and its offset inside the domain.
  const int w_m = loc_m[level], w_n = loc_n[level];
  const int ed_m = w_m / domain_size, off_m = w_m % domain_size;
  const int ed_n = w_n / domain_size, off_n = w_n % domain_size;
  if (ed_m == ed_n && off_m != off_n) return HybridEpComm::kAllGather;  // lines 9-11
  if (ed_m != ed_n && off_m == off_n) return HybridEpComm::kAllToAll;   // lines 12-14
  return HybridEpComm::kNone;
}

std::vector<HybridEpCommCounts> hybridep_enumerate_comms(const std::vector<int>& level_counts,
                                                         const std::vector<int>& domain_sizes) {
  check_levels(level_counts, domain_sizes);
  const long long g = gpu_count(level_counts);
  std::vector<std::vector<int>> locs;
  locs.reserve(static_cast<std::size_t>(g));
  for (long long m = 0; m < g; ++m) locs.push_back(location(m, level_counts));

  std::vector<HybridEpCommCounts> counts(level_counts.size());
  for (long long m = 0; m < g; ++m)
    for (long long n = 0; n < g; ++n) {
      if (m == n) continue;
      for (std::size_t l = 0; l < level_counts.size(); ++l) {
        const HybridEpComm c =
            hybridep_comm_type(locs[m], locs[n], static_cast<int>(l), domain_sizes[l]);
        if (c == HybridEpComm::kAllGather) ++counts[l].all_gather;
        if (c == HybridEpComm::kAllToAll) ++counts[l].all_to_all;
      }
    }
  return counts;
}

std::vector<HybridEpCommCounts> hybridep_count_comms(const std::vector<int>& level_counts,
                                                     const std::vector<int>& domain_sizes) {
  check_levels(level_counts, domain_sizes);
  const long long g = gpu_count(level_counts);
  std::vector<HybridEpCommCounts> counts(level_counts.size());
  for (std::size_t l = 0; l < level_counts.size(); ++l) {
    const long long sf = level_counts[l], s = domain_sizes[l];
    counts[l].all_gather = g * (s - 1);
    counts[l].all_to_all = g * (sf / s - 1);
  }
  return counts;
}

HybridEpCommCounts hybridep_total_comms(const std::vector<HybridEpCommCounts>& per_level) {
  HybridEpCommCounts total;
  for (const HybridEpCommCounts& c : per_level) {
    total.all_to_all += c.all_to_all;
    total.all_gather += c.all_gather;
  }
  return total;
}

}  // namespace moecomm::plan
