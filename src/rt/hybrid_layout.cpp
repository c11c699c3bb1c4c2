#include "rt/hybrid_layout.h"

#include <algorithm>
#include <numeric>

#include "core/error.h"
#include "core/rank_groups.h"

namespace moecomm::rt {

HybridLayout hybrid_layout(const core::RankGroup& ep, int ep_index, int domain_size,
                           const std::vector<int>& order_in, const std::string& where) {
  const int n = static_cast<int>(ep.size());
  if (domain_size < 1 || n % domain_size != 0)
    throw Error(where, "hybrid_domain=" + std::to_string(domain_size) +
                           " must divide the EP group's " + std::to_string(n) + " ranks");
  std::vector<int> order = order_in;
  if (order.empty()) {
    order.resize(static_cast<size_t>(n));
    std::iota(order.begin(), order.end(), 0);
  }
  std::vector<int> sorted = order;
  std::sort(sorted.begin(), sorted.end());
  for (int i = 0; i < n; ++i)
    if (static_cast<int>(sorted.size()) != n || sorted[static_cast<size_t>(i)] != i)
      throw Error(where, "the member order is no permutation of the EP group's " +
                             std::to_string(n) + " members");
  HybridLayout out;
  out.domain_size = domain_size;
  out.position = static_cast<int>(std::find(order.begin(), order.end(), ep_index) - order.begin());
  out.offset = out.position % domain_size;
  const int first = out.position - out.offset;
  for (int j = 0; j < domain_size; ++j) out.domain.push_back(ep[order[first + j]]);
  for (int d = 0; d < n / domain_size; ++d)
    out.peers.push_back(ep[order[d * domain_size + out.offset]]);
  return out;
}

std::vector<CommKey> hybrid_comm_keys(const core::ParallelConfig& parallel, int domain_size,
                                      const std::vector<int>& order, int channel) {
  std::vector<CommKey> keys;
  for (const core::RankGroup& ep : core::build_rank_groups(parallel).ep) {
    for (int i = 0; i < static_cast<int>(ep.size()); ++i) {
      const HybridLayout h = hybrid_layout(ep, i, domain_size, order, "hybrid_domain");
      keys.push_back({h.domain, channel, "hybrid domain"});  // the pool merges duplicates
      keys.push_back({h.peers, 0, "hybrid peers"});
    }
    keys.push_back({ep, channel, "ep"});
  }
  return keys;
}

}  // namespace moecomm::rt
