#pragma once
// The communicators of a parallel configuration's rank groups (core::RankGroups): for each
// kind ("world", "tp", "cp", "dp", "pp", "dp_cp", "esp", "ep", "edp") and each stream, this
// rank's group as its own communicator. Kinds with equal groups share one communicator per
// stream (collectives on one stream are issued in order, so sharing cannot mismatch).
#include <map>
#include <string>

#include "rt/comm_pool.h"

namespace moecomm::rt {

class GroupComms {
 public:
  // Collective over `world`, whose size must be the groups' world.
  GroupComms(MPI_Comm world, const core::RankGroups& groups, int num_streams = 1);

  // Throws moecomm::Error on an unknown kind or a stream outside [0, num_streams).
  const Comm& get(const std::string& kind, int stream = 0) const;
  int num_streams() const { return streams_; }

 private:
  CommPool pool_;
  std::map<std::string, core::RankGroup> mine_;  // kind -> this rank's group
  int streams_ = 1;
};

}  // namespace moecomm::rt
