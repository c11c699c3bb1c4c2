// Preloaded (LD_PRELOAD) into one rank of a real `moecomm train` to kill it with SIGKILL in
// the middle of a collective, through MPI's profiling interface: the Nth call to the MPI
// function named by MOECOMM_KILL_CALL never reaches MPI, so its peers wait on a dead rank.
//   MPI_Ialltoallv: the flat A2A's data exchange (its counts went through MPI_Ialltoall).
//   MPI_Isend: a step of a float ring (the runtime's AllReduce above 64 KiB reduces and
//     scatters fp32 blocks around a ring; byte rings and token paths are not counted).
// N is MOECOMM_KILL_NTH (default 1). MOECOMM_KILL_LOG=1 prints every counted call, to choose N.
#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "rt/mpi_base.h"

namespace {

// Counts calls to `fn`; true for the one to die in.
bool dies_in(const char* fn, long bytes) {
  static const char* target = std::getenv("MOECOMM_KILL_CALL");
  static const char* nth_text = std::getenv("MOECOMM_KILL_NTH");
  static const long nth = nth_text ? std::atol(nth_text) : 1;
  static const bool log = std::getenv("MOECOMM_KILL_LOG") != nullptr;
  static std::atomic<long> calls{0};  // the runtime's streams call MPI from several threads
  if (!target || std::strcmp(target, fn) != 0) return false;
  const long call = ++calls;
  if (log) std::fprintf(stderr, "kill_in_call: call %ld: %s of %ld bytes\n", call, fn, bytes);
  return call == nth;
}

void die_in(const char* fn) {
  std::fprintf(stderr, "kill_in_call: SIGKILL in %s\n", fn);
  std::fflush(stderr);
  std::raise(SIGKILL);
}

long bytes_of(MPI_Datatype type, long count) {
  int size = 0;
  PMPI_Type_size(type, &size);
  return size * count;
}

}  // namespace

extern "C" {

int MPI_Ialltoallv(const void* sendbuf, const int sendcounts[], const int sdispls[],
                   MPI_Datatype sendtype, void* recvbuf, const int recvcounts[],
                   const int rdispls[], MPI_Datatype recvtype, MPI_Comm comm,
                   MPI_Request* request) {
  int n = 0;
  PMPI_Comm_size(comm, &n);
  long count = 0;
  for (int i = 0; i < n; ++i) count += sendcounts[i];
  if (dies_in("MPI_Ialltoallv", bytes_of(sendtype, count))) die_in("MPI_Ialltoallv");
  return PMPI_Ialltoallv(sendbuf, sendcounts, sdispls, sendtype, recvbuf, recvcounts, rdispls,
                         recvtype, comm, request);
}

int MPI_Isend(const void* buf, int count, MPI_Datatype datatype, int dest, int tag, MPI_Comm comm,
              MPI_Request* request) {
  if (datatype == MPI_FLOAT && dies_in("MPI_Isend", bytes_of(datatype, count))) die_in("MPI_Isend");
  return PMPI_Isend(buf, count, datatype, dest, tag, comm, request);
}

}  // extern "C"
