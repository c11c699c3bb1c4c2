#include "rt/comm_pool.h"

#include <algorithm>
#include <set>

#include "core/error.h"

namespace moecomm::rt {
namespace {

void check_group(const CommKey& key, int world_size) {
  const std::string where = "communicator " + group_text(key.group);
  if (key.group.empty()) throw Error(where, "the group is empty");
  std::set<int> seen;
  for (int r : key.group) {
    if (r < 0 || r >= world_size) {
      throw Error(where, "rank " + std::to_string(r) + " is outside the world of " +
                             std::to_string(world_size));
    }
    if (!seen.insert(r).second) throw Error(where, "rank " + std::to_string(r) + " repeats");
  }
}

// Greedy packing of keys into batches of rank-disjoint groups; one split per batch.
std::vector<std::vector<const CommKey*>> batches(const std::vector<const CommKey*>& keys,
                                                 int world_size) {
  std::vector<std::vector<const CommKey*>> out;
  std::vector<std::vector<char>> used;
  for (const CommKey* key : keys) {
    size_t b = 0;
    auto fits = [&](size_t i) {
      return std::none_of(key->group.begin(), key->group.end(), [&](int r) { return used[i][r]; });
    };
    while (b < out.size() && !fits(b)) ++b;
    if (b == out.size()) {
      out.emplace_back();
      used.emplace_back(world_size, 0);
    }
    out[b].push_back(key);
    for (int r : key->group) used[b][r] = 1;
  }
  return out;
}

}  // namespace

CommPool::CommPool(MPI_Comm world, const std::vector<CommKey>& keys) {
  int world_size = 0, me = 0;
  check_mpi(MPI_Comm_size(world, &world_size), "MPI_Comm_size");
  check_mpi(MPI_Comm_rank(world, &me), "MPI_Comm_rank");
  std::set<CommKey> seen;
  std::vector<const CommKey*> unique;
  for (const CommKey& key : keys) {
    check_group(key, world_size);
    if (seen.insert(key).second) unique.push_back(&key);
  }
  for (const auto& batch : batches(unique, world_size)) {
    int color = MPI_UNDEFINED, position = 0;
    for (size_t i = 0; i < batch.size(); ++i) {
      const auto it = std::find(batch[i]->group.begin(), batch[i]->group.end(), me);
      if (it == batch[i]->group.end()) continue;
      color = static_cast<int>(i);
      position = static_cast<int>(it - batch[i]->group.begin());
    }
    MPI_Comm comm = MPI_COMM_NULL;
    check_mpi(MPI_Comm_split(world, color, position, &comm), "MPI_Comm_split");
    if (color == MPI_UNDEFINED) continue;
    const CommKey& key = *batch[color];
    const std::string name = key.name.empty() ? "channel " + std::to_string(key.channel) : key.name;
    comms_.emplace(key, Comm(comm, key.group, name));
  }
}

const Comm& CommPool::at(const CommKey& key) const {
  const auto it = comms_.find(key);
  if (it == comms_.end()) {
    throw Error("communicators", "this rank has no communicator for group " +
                                     group_text(key.group) + " channel " +
                                     std::to_string(key.channel));
  }
  return it->second;
}

}  // namespace moecomm::rt
