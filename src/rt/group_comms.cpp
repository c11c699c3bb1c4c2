#include "rt/group_comms.h"

#include <algorithm>
#include <numeric>
#include <utility>
#include <vector>

#include "core/error.h"

namespace moecomm::rt {

GroupComms::GroupComms(MPI_Comm world, const core::RankGroups& groups, int num_streams)
    : streams_(num_streams) {
  if (num_streams < 1) throw Error("communicators", "need at least one stream");
  int world_size = 0, me = 0;
  check_mpi(MPI_Comm_size(world, &world_size), "MPI_Comm_size");
  check_mpi(MPI_Comm_rank(world, &me), "MPI_Comm_rank");
  size_t covered = 0;
  for (const core::RankGroup& g : groups.tp) covered += g.size();
  if (covered != static_cast<size_t>(world_size)) {  // every rank must agree, or splits hang
    throw Error("communicators", "the rank groups cover " + std::to_string(covered) +
                                     " ranks but the world has " + std::to_string(world_size));
  }
  core::RankGroup all(world_size);
  std::iota(all.begin(), all.end(), 0);
  const std::vector<std::pair<std::string, std::vector<core::RankGroup>>> kinds = {
      {"world", {all}},    {"tp", groups.tp}, {"cp", groups.cp},
      {"dp", groups.dp},   {"pp", groups.pp}, {"dp_cp", groups.dp_cp},
      {"esp", groups.esp}, {"ep", groups.ep}, {"edp", groups.edp}};
  std::vector<CommKey> keys;
  for (int s = 0; s < num_streams; ++s) {
    for (const auto& [kind, list] : kinds) {
      for (const core::RankGroup& g : list) {
        keys.push_back({g, s, kind + " stream " + std::to_string(s)});
      }
    }
  }
  for (const auto& [kind, list] : kinds) {
    for (const core::RankGroup& g : list) {
      if (std::find(g.begin(), g.end(), me) != g.end()) mine_[kind] = g;
    }
    if (!mine_.count(kind)) throw Error("communicators", "rank in no " + kind + " group");
  }
  pool_ = CommPool(world, keys);
}

const Comm& GroupComms::get(const std::string& kind, int stream) const {
  const auto it = mine_.find(kind);
  if (it == mine_.end()) throw Error("communicators", "unknown group kind \"" + kind + "\"");
  if (stream < 0 || stream >= streams_) {
    throw Error("communicators", "stream " + std::to_string(stream) + " is outside [0, " +
                                     std::to_string(streams_) + ")");
  }
  return pool_.at({it->second, stream});
}

}  // namespace moecomm::rt
