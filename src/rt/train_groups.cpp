#include "rt/train_groups.h"

#include <numeric>
#include <string>

#include "core/error.h"

namespace moecomm::rt {

TrainGroups train_groups(int world, int tp, int ep, int experts, int me, const std::string& where,
                         int pp) {
  if (pp < 1 || world % pp != 0)
    throw Error(
        where, "pp=" + std::to_string(pp) + " must divide the " + std::to_string(world) + " ranks");
  const int stage_ranks = world / pp;
  if (tp < 1 || stage_ranks % tp != 0)
    throw Error(where, "tp=" + std::to_string(tp) + " must divide the " +
                           std::to_string(stage_ranks) + " ranks of a pipeline stage");
  if (ep < 1 || (stage_ranks / tp) % ep != 0)
    throw Error(
        where, "ep=" + std::to_string(ep) + " must divide the " + std::to_string(stage_ranks / tp) +
                   " ranks of one TP index in a pipeline stage (world " + std::to_string(world) +
                   " / tp " + std::to_string(tp) + " / pp " + std::to_string(pp) + ")");
  if (experts % ep != 0)
    throw Error("model",
                std::to_string(experts) + " experts do not split over ep=" + std::to_string(ep));
  TrainGroups g;
  g.parallel.tp = g.parallel.esp = tp;
  g.parallel.pp = pp;
  g.parallel.dp = stage_ranks / tp;
  g.parallel.ep = ep;
  g.parallel.edp = stage_ranks / (tp * ep);
  const core::RankGroups all = core::build_rank_groups(g.parallel);
  g.world.resize(static_cast<size_t>(world));
  std::iota(g.world.begin(), g.world.end(), 0);
  g.tp = all.of("tp", me);
  g.dp = all.of("dp", me);
  g.ep = all.of("ep", me);
  g.edp = all.of("edp", me);
  g.pp = all.of("pp", me);
  g.tp_index = me % tp;
  g.stage = me / stage_ranks;
  g.data_rank = (me % stage_ranks) / tp;
  g.data_ranks = stage_ranks / tp;
  return g;
}

std::vector<CommKey> train_comm_keys(const core::ParallelConfig& parallel, int channels) {
  const core::RankGroups all = core::build_rank_groups(parallel);
  std::vector<CommKey> keys;
  core::RankGroup world(static_cast<size_t>(parallel.world()));
  std::iota(world.begin(), world.end(), 0);
  for (int c = 0; c < channels; ++c) {
    keys.push_back({world, c, "world"});
    for (const auto& [name, groups] :
         {std::pair{"tp", &all.tp}, {"dp", &all.dp}, {"ep", &all.ep}, {"edp", &all.edp}})
      for (const core::RankGroup& g : *groups) keys.push_back({g, c, name});
  }
  return keys;
}

}  // namespace moecomm::rt
