#include "core/rank_groups.h"

#include <algorithm>

#include "core/error.h"

namespace moecomm::core {

std::vector<RankGroup> groups_along(const std::vector<int>& sizes, size_t dim) {
  int world = 1;
  for (int s : sizes) world *= s;
  int stride = 1;
  for (size_t i = 0; i < dim; ++i) stride *= sizes[i];
  const int size = sizes.at(dim);
  std::vector<RankGroup> groups;
  for (int r = 0; r < world; ++r) {
    if ((r / stride) % size != 0) continue;  // r is the first member of its group
    RankGroup g(size);
    for (int i = 0; i < size; ++i) g[i] = r + i * stride;
    groups.push_back(std::move(g));
  }
  return groups;
}

RankGroups build_rank_groups(const ParallelConfig& c) {
  RankGroups g;
  const std::vector<int> dense = {c.tp, c.cp, c.dp, c.pp};
  g.tp = groups_along(dense, 0);
  g.cp = groups_along(dense, 1);
  g.dp = groups_along(dense, 2);
  g.pp = groups_along(dense, 3);
  g.dp_cp = groups_along({c.tp, c.cp * c.dp, c.pp}, 1);  // cp and dp are adjacent
  const std::vector<int> moe = {c.esp, c.ep, c.edp, c.pp};
  g.esp = groups_along(moe, 0);
  g.ep = groups_along(moe, 1);
  g.edp = groups_along(moe, 2);
  return g;
}

const RankGroup& RankGroups::of(const std::string& kind, int rank) const {
  const std::vector<RankGroup>* list = kind == "tp"    ? &tp
                                       : kind == "cp"  ? &cp
                                       : kind == "dp"  ? &dp
                                       : kind == "pp"  ? &pp
                                       : kind == "esp" ? &esp
                                       : kind == "ep"  ? &ep
                                       : kind == "edp" ? &edp
                                                       : nullptr;
  if (!list) throw Error("rank groups", "unknown group kind \"" + kind + "\"");
  for (const RankGroup& group : *list)
    if (std::find(group.begin(), group.end(), rank) != group.end()) return group;
  throw Error("rank groups", "rank " + std::to_string(rank) + " is in no " + kind + " group");
}

}  // namespace moecomm::core
