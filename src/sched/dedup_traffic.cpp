#include "sched/dedup_traffic.h"

#include <algorithm>
#include <string>

#include "core/error.h"
#include "sched/a2a_routing.h"

namespace moecomm::sched {
namespace {

// C(a - held, k) / C(a, k): k distinct picks among a miss all `held` of them.
double miss_all(int64_t a, int64_t held, int k) {
  double p = 1;
  for (int i = 0; i < k; ++i) {
    if (a - held - i <= 0) return 0;
    p *= double(a - held - i) / double(a - i);
  }
  return p;
}

void check(const RouterShape& r, size_t set_groups) {
  const std::string shape = "experts " + std::to_string(r.experts) + ", top_k " +
                            std::to_string(r.top_k) + ", router_groups " +
                            std::to_string(r.groups) + ", router_group_top_k " +
                            std::to_string(r.group_top_k);
  if (r.experts < 1 || r.top_k < 1 || r.groups < 1 || r.experts % r.groups != 0 ||
      r.group_top_k < 0 || r.group_top_k > r.groups)
    throw Error("a2a=dedup", "cannot price the routing of " + shape);
  const int picked = r.group_top_k == 0 ? r.groups : r.group_top_k;
  if (int64_t(picked) * (r.experts / r.groups) < r.top_k)
    throw Error("a2a=dedup", shape + ": the picked groups hold fewer experts than top_k");
  if (set_groups != size_t(r.groups))
    throw Error("a2a=dedup", "a set's experts per group: " + std::to_string(set_groups) +
                                 " counts for " + std::to_string(r.groups) + " groups");
}

}  // namespace

double hit_probability(const RouterShape& r, const std::vector<int64_t>& experts_in_set) {
  check(r, experts_in_set.size());
  const int m = r.group_top_k == 0 ? r.groups : r.group_top_k;
  const int64_t per_group = r.experts / r.groups, allowed = m * per_group;
  int64_t total = 0;
  for (int64_t e : experts_in_set) total += e;
  // ways[j][a]: subsets of j groups holding a of the set's experts (counts as doubles).
  std::vector<std::vector<double>> ways(size_t(m) + 1, std::vector<double>(size_t(total) + 1, 0));
  ways[0][0] = 1;
  for (int64_t held : experts_in_set)
    for (int j = m; j >= 1; --j)
      for (int64_t a = total; a >= held; --a)
        ways[size_t(j)][size_t(a)] += ways[size_t(j) - 1][size_t(a - held)];
  double subsets = 0, miss = 0;
  for (int64_t a = 0; a <= total; ++a) {
    subsets += ways[size_t(m)][size_t(a)];
    miss += ways[size_t(m)][size_t(a)] * miss_all(allowed, a, r.top_k);
  }
  return 1.0 - miss / subsets;
}

DedupMatrices dedup_matrices(const RouterShape& router, const core::RankGroup& group,
                             int ranks_per_node, double row_bytes_per_token) {
  const int n = static_cast<int>(group.size());
  if (router.experts % n != 0)
    throw Error("a2a=dedup", std::to_string(router.experts) + " experts over an EP group of " +
                                 std::to_string(n));
  const int64_t per_member = router.experts / n, per_group = router.experts / router.groups;
  // The set's experts per router group, for a set of members.
  const auto counts = [&](const std::vector<int>& members) {
    std::vector<int64_t> in_group(size_t(router.groups), 0);
    for (int i : members)
      for (int64_t e = i * per_member; e < (i + 1) * per_member; ++e)
        ++in_group[size_t(e / per_group)];
    return in_group;
  };
  DedupMatrices out;
  out.pair.assign(size_t(n) * n, 0);
  for (int j = 0; j < n; ++j) {
    const double bytes = row_bytes_per_token * hit_probability(router, counts({j}));
    for (int i = 0; i < n; ++i) out.pair[size_t(i) * n + j] = bytes;
  }
  out.node = out.pair;
  const std::vector<std::vector<int>> nodes = members_by_node(group, ranks_per_node);
  if (nodes.size() < 2) return out;  // the flat plan: every row straight to its member
  std::vector<int> node_of(static_cast<size_t>(n)), local_of(static_cast<size_t>(n));
  for (size_t x = 0; x < nodes.size(); ++x)
    for (size_t l = 0; l < nodes[x].size(); ++l) {
      node_of[size_t(nodes[x][l])] = int(x);
      local_of[size_t(nodes[x][l])] = int(l);
    }
  for (size_t x = 0; x < nodes.size(); ++x) {
    const double bytes = row_bytes_per_token * hit_probability(router, counts(nodes[x]));
    for (int i = 0; i < n; ++i) {
      if (node_of[size_t(i)] == int(x)) continue;
      for (int j : nodes[x]) out.node[size_t(i) * n + j] = 0;
      out.node[size_t(i) * n + nodes[x][size_t(local_of[size_t(i)])]] = bytes;
    }
  }
  return out;
}

}  // namespace moecomm::sched
