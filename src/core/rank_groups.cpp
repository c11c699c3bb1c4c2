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

namespace {

// Horizontal CP (MoNTA Fig. 12): the dense grid [tp, q, cp, dp / q, pp] with q = esp ep / tp,
// the TP groups one EP group spans, so a CP group's members sit in different EP groups. DP
// runs along both q and dp / q (q fastest).
void horizontal_dense_groups(const ParallelConfig& c, RankGroups& g) {
  check_cp_layout(c, "cp_layout");
  const int q = c.esp * c.ep / c.tp, outer = c.dp / q;
  const std::vector<int> grid = {c.tp, q, c.cp, outer, c.pp};
  g.tp = groups_along(grid, 0);
  g.cp = groups_along(grid, 2);
  g.pp = groups_along(grid, 4);
  const int stride_q = c.tp, stride_outer = c.tp * q * c.cp;
  for (const RankGroup& along_q : groups_along(grid, 1)) {
    if ((along_q.front() / stride_outer) % outer != 0) continue;  // first of its DP group
    RankGroup dp;
    for (int b = 0; b < outer; ++b)
      for (int a = 0; a < q; ++a) dp.push_back(along_q.front() + a * stride_q + b * stride_outer);
    g.dp.push_back(std::move(dp));
  }
}

}  // namespace

RankGroups build_rank_groups(const ParallelConfig& c) {
  RankGroups g;
  const std::vector<int> dense = {c.tp, c.cp, c.dp, c.pp};
  if (c.cp_layout == CpLayout::kHorizontal) {
    horizontal_dense_groups(c, g);
  } else {
    g.tp = groups_along(dense, 0);
    g.cp = groups_along(dense, 1);
    g.dp = groups_along(dense, 2);
    g.pp = groups_along(dense, 3);
  }
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

std::string format_rank_ranges(const std::vector<int>& ranks, const std::string& separator) {
  std::string out;
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    if (!out.empty()) out += separator;
    out += std::to_string(ranks[i]);
    if (j > i) {  // appended apart: GCC 12's -O3 -Wrestrict misfires on "-" + std::string
      out += '-';
      out += std::to_string(ranks[j]);
    }
    i = j + 1;
  }
  return out;
}

}  // namespace moecomm::core
