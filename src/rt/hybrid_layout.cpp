#include "rt/hybrid_layout.h"

#include "core/rank_groups.h"
#include "sched/hybrid_routing.h"

namespace moecomm::rt {

HybridLayout hybrid_layout(const core::RankGroup& ep, int ep_index, int domain_size,
                           const std::vector<int>& order, const std::string& where) {
  const sched::HybridRouting routing(static_cast<int>(ep.size()), domain_size, order, where);
  HybridLayout out;
  out.domain_size = domain_size;
  out.position = routing.position(ep_index);
  out.offset = routing.offset(ep_index);
  for (int m : routing.domain_members(out.position / domain_size))
    out.domain.push_back(ep[static_cast<size_t>(m)]);
  for (int m : routing.destinations(ep_index)) out.peers.push_back(ep[static_cast<size_t>(m)]);
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
