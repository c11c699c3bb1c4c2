#include "rt/train_groups.h"

#include <numeric>
#include <string>

#include "core/error.h"

namespace moecomm::rt {

TrainGroups train_groups(int world, int tp, int ep, int experts, int me, const std::string& where) {
  if (tp < 1 || world % tp != 0)
    throw Error(
        where, "tp=" + std::to_string(tp) + " must divide the " + std::to_string(world) + " ranks");
  if (ep < 1 || (world / tp) % ep != 0)
    throw Error(where, "ep=" + std::to_string(ep) + " must divide the " +
                           std::to_string(world / tp) + " ranks of one TP index (world " +
                           std::to_string(world) + " / tp " + std::to_string(tp) + ")");
  if (experts % ep != 0)
    throw Error("model",
                std::to_string(experts) + " experts do not split over ep=" + std::to_string(ep));
  TrainGroups g;
  g.parallel.tp = g.parallel.esp = tp;
  g.parallel.dp = world / tp;
  g.parallel.ep = ep;
  g.parallel.edp = world / (tp * ep);
  const core::RankGroups all = core::build_rank_groups(g.parallel);
  g.world.resize(static_cast<size_t>(world));
  std::iota(g.world.begin(), g.world.end(), 0);
  g.tp = all.of("tp", me);
  g.dp = all.of("dp", me);
  g.ep = all.of("ep", me);
  g.edp = all.of("edp", me);
  g.tp_index = me % tp;
  g.data_rank = me / tp;
  g.data_ranks = world / tp;
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
