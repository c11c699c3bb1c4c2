#pragma once
// A communicator over one rank group as this rank sees it. It keeps the group's global ranks
// beside the MPI handle, so timeouts can name the peers and byte counts can tell link levels.
#include "rt/mpi_base.h"

#include <string>

#include "core/rank_groups.h"

namespace moecomm::rt {

class Comm {
 public:
  Comm() = default;
  // Takes ownership of `comm` (freed on destruction); member i of `comm` is group[i].
  Comm(MPI_Comm comm, core::RankGroup group, std::string name);
  Comm(Comm&& other) noexcept;
  Comm& operator=(Comm&& other) noexcept;
  Comm(const Comm&) = delete;
  Comm& operator=(const Comm&) = delete;
  ~Comm();

  MPI_Comm handle() const { return comm_; }
  int rank() const { return rank_; }  // this rank's member index
  int size() const { return static_cast<int>(group_.size()); }
  int global_rank(int member) const { return group_.at(member); }
  int my_global_rank() const { return group_.at(rank_); }
  const core::RankGroup& group() const { return group_; }
  // What it carries, for messages: the schedule's stream name ("token comm"), "world", ...
  const std::string& name() const { return name_; }

 private:
  void release();

  MPI_Comm comm_ = MPI_COMM_NULL;
  core::RankGroup group_;
  std::string name_;
  int rank_ = -1;
};

// "[0,1,2,3]"
std::string group_text(const core::RankGroup& group);

// Throws std::runtime_error with MPI's message when `code` is not MPI_SUCCESS.
void check_mpi(int code, const char* what);

}  // namespace moecomm::rt
