#pragma once
// Which ranks form each TP, CP, DP, PP group of the dense part and each ESP, EP, EDP group
// of the MoE part. Megatron-Core order: tp (esp) fastest, then cp (ep), dp (edp), pp; so
// with tp = esp = devices per node those groups stay inside a node. With
// cp_layout=horizontal the dense part puts cp after the TP groups an EP group spans.
#include <string>
#include <vector>

#include "core/parallel_config.h"

namespace moecomm::core {

using RankGroup = std::vector<int>;

struct RankGroups {
  std::vector<RankGroup> tp, cp, dp, pp;  // dense part
  std::vector<RankGroup> dp_cp;           // dense gradients reduce over dp x cp (Megatron-Core)
  std::vector<RankGroup> esp, ep, edp;    // MoE part

  // The group of `kind` ("tp", "cp", "dp", "pp", "esp", "ep", "edp") holding `rank`.
  const RankGroup& of(const std::string& kind, int rank) const;
};

RankGroups build_rank_groups(const ParallelConfig& config);

// The groups along dimension `dim` of a grid whose sizes are listed fastest first.
std::vector<RankGroup> groups_along(const std::vector<int>& sizes, size_t dim);

// Ranks as messages and flags write them: runs of consecutive ranks as ranges, in the order
// given, joined by `separator` ("0-7,32" with ",", "0, 2-3" with ", ").
std::string format_rank_ranges(const std::vector<int>& ranks, const std::string& separator);

}  // namespace moecomm::core
