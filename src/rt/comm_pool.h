#pragma once
// Communicators for many (group, channel) keys, built with few MPI_Comm_split calls: keys whose
// groups share no rank are split from the world at once. A channel is typically a stream:
// each stream gets its own communicator per group, so collectives on different streams may
// be in flight at once without MPI matching one stream's collective with another's.
#include "rt/mpi_base.h"

#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "rt/comm.h"

namespace moecomm::rt {

struct CommKey {
  core::RankGroup group;  // global ranks; member i is group[i]
  int channel = 0;
  std::string name = {};  // for messages ("token comm"); not part of the key

  bool operator<(const CommKey& o) const {
    return std::tie(channel, group) < std::tie(o.channel, o.group);
  }
};

class CommPool {
 public:
  CommPool() = default;
  // Collective over `world`: every rank passes the same keys in the same order (duplicates are
  // merged). Throws moecomm::Error, before any MPI call, on a group that is empty, repeats a
  // rank or names one outside the world.
  CommPool(MPI_Comm world, const std::vector<CommKey>& keys);

  bool has(const CommKey& key) const { return comms_.count(key) > 0; }
  // This rank's communicator for `key`; throws moecomm::Error when it is not a member.
  const Comm& at(const CommKey& key) const;

 private:
  std::map<CommKey, Comm> comms_;
};

}  // namespace moecomm::rt
