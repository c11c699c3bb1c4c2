#include "rt/comm.h"

#include <stdexcept>
#include <utility>

namespace moecomm::rt {

Comm::Comm(MPI_Comm comm, core::RankGroup group, std::string name)
    : comm_(comm), group_(std::move(group)), name_(std::move(name)) {
  int size = 0;
  check_mpi(MPI_Comm_rank(comm_, &rank_), "MPI_Comm_rank");
  check_mpi(MPI_Comm_size(comm_, &size), "MPI_Comm_size");
  if (size != this->size()) {
    throw std::logic_error("communicator " + name_ + " has " + std::to_string(size) +
                           " members, its group " + std::to_string(this->size()));
  }
}

Comm::Comm(Comm&& other) noexcept
    : comm_(std::exchange(other.comm_, MPI_COMM_NULL)),
      group_(std::move(other.group_)),
      name_(std::move(other.name_)),
      rank_(other.rank_) {}

Comm& Comm::operator=(Comm&& other) noexcept {
  if (this != &other) {
    release();
    comm_ = std::exchange(other.comm_, MPI_COMM_NULL);
    group_ = std::move(other.group_);
    name_ = std::move(other.name_);
    rank_ = other.rank_;
  }
  return *this;
}

Comm::~Comm() {
  release();
}

void Comm::release() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  // After MPI_Finalize (or an abort path) the handle is gone with the library.
  if (comm_ != MPI_COMM_NULL && !finalized) MPI_Comm_free(&comm_);
  comm_ = MPI_COMM_NULL;
}

std::string group_text(const core::RankGroup& group) {
  std::string text = "[";
  for (size_t i = 0; i < group.size(); ++i) {
    if (i) text += ',';  // appended apart: GCC 12 -O3 warns (-Wrestrict) on "," + to_string
    text += std::to_string(group[i]);
  }
  return text + "]";
}

void check_mpi(int code, const char* what) {
  if (code == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(code, text, &len);
  throw std::runtime_error(std::string(what) + " failed: " + std::string(text, len));
}

}  // namespace moecomm::rt
