#include "rt/collectives.h"

#include <climits>
#include <numeric>
#include <string>

#include "core/error.h"
#include "rt/hierarchical_a2a.h"

namespace moecomm::rt {
namespace {

// MPI counts are int; larger messages would silently wrap.
int as_count(int64_t n, const std::string& what) {
  if (n < 0 || n > INT_MAX) {
    throw Error(what, "count " + std::to_string(n) + " is outside [0, INT_MAX]");
  }
  return static_cast<int>(n);
}

void check_counts(const Comm& comm, size_t send_size, std::span<const int64_t> counts,
                  const std::string& label) {
  if (counts.size() != static_cast<size_t>(comm.size())) {
    throw Error(label, "all_to_all_v needs " + std::to_string(comm.size()) + " counts, got " +
                           std::to_string(counts.size()));
  }
  int64_t sum = 0;
  for (int64_t c : counts) sum += as_count(c, label);
  if (sum != static_cast<int64_t>(send_size)) {
    throw Error(label, "all_to_all_v counts sum to " + std::to_string(sum) + " but " +
                           std::to_string(send_size) + " bytes are given");
  }
}

std::vector<int> displacements(const std::vector<int>& counts, const std::string& label) {
  std::vector<int> displs(counts.size(), 0);
  int64_t at = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    displs[i] = as_count(at, label);
    at += counts[i];
  }
  as_count(at, label);
  return displs;
}

Received<std::byte> flat_all_to_all(const Comm& comm, std::span<const std::byte> send,
                                    std::span<const int64_t> send_counts,
                                    const CallOptions& options) {
  const int n = comm.size();
  std::vector<int> sc(n), rc(n);
  for (int j = 0; j < n; ++j) sc[j] = static_cast<int>(send_counts[j]);
  MPI_Request req = MPI_REQUEST_NULL;
  check_mpi(MPI_Ialltoall(sc.data(), 1, MPI_INT, rc.data(), 1, MPI_INT, comm.handle(), &req),
            "MPI_Ialltoall");
  wait_all({&req, 1}, comm, "all_to_all_v counts exchange", options);
  const std::vector<int> sd = displacements(sc, options.label);
  const std::vector<int> rd = displacements(rc, options.label);
  Received<std::byte> out{std::vector<std::byte>(size_t(rd.back()) + rc.back()), {}};
  check_mpi(MPI_Ialltoallv(send.data(), sc.data(), sd.data(), MPI_BYTE, out.data.data(), rc.data(),
                           rd.data(), MPI_BYTE, comm.handle(), &req),
            "MPI_Ialltoallv");
  wait_all({&req, 1}, comm, "all_to_all_v", options);
  out.counts.assign(rc.begin(), rc.end());
  if (options.bytes) {
    for (int j = 0; j < n; ++j) {
      options.bytes->add(comm.my_global_rank(), comm.global_rank(j), sc[j], options.ranks_per_node);
    }
  }
  return out;
}

}  // namespace

Received<std::byte> all_to_all_v(const Comm& comm, std::span<const std::byte> send,
                                 std::span<const int64_t> send_counts, sched::Algorithm algorithm,
                                 const CallOptions& options) {
  check_counts(comm, send.size(), send_counts, options.label);
  if (algorithm == sched::Algorithm::k1DH || algorithm == sched::Algorithm::k2DH) {
    const auto nodes = members_by_node(comm.group(), options.ranks_per_node);
    if (nodes.size() >= 2) {  // one node or uneven nodes: nothing to gain, as the simulator
      const auto plan =
          algorithm == sched::Algorithm::k2DH ? two_dh_plan(nodes) : one_dh_plan(nodes);
      return routed_all_to_all(comm, send, send_counts, plan, options);
    }
  }
  return flat_all_to_all(comm, send, send_counts, options);
}

void all_gather(const Comm& comm, std::span<const std::byte> mine, std::span<std::byte> out,
                const CallOptions& options) {
  if (out.size() != mine.size() * comm.size()) {
    throw Error(options.label, "all_gather output must hold " + std::to_string(comm.size()) +
                                   " blocks of " + std::to_string(mine.size()) + " bytes");
  }
  const int count = as_count(static_cast<int64_t>(mine.size()), options.label);
  MPI_Request req = MPI_REQUEST_NULL;
  check_mpi(MPI_Iallgather(mine.data(), count, MPI_BYTE, out.data(), count, MPI_BYTE, comm.handle(),
                           &req),
            "MPI_Iallgather");
  wait_all({&req, 1}, comm, "all_gather", options);
}

std::vector<float> reduce_scatter_sum(const Comm& comm, std::span<const float> in,
                                      const CallOptions& options) {
  const size_t n = comm.size();
  if (in.size() % n != 0) {
    throw Error(options.label, "reduce_scatter input of " + std::to_string(in.size()) +
                                   " floats does not split into " + std::to_string(n) +
                                   " equal blocks");
  }
  std::vector<float> out(in.size() / n);
  const int count = as_count(static_cast<int64_t>(out.size()), options.label);
  MPI_Request req = MPI_REQUEST_NULL;
  check_mpi(MPI_Ireduce_scatter_block(in.data(), out.data(), count, MPI_FLOAT, MPI_SUM,
                                      comm.handle(), &req),
            "MPI_Ireduce_scatter_block");
  wait_all({&req, 1}, comm, "reduce_scatter", options);
  return out;
}

void all_reduce_sum(const Comm& comm, std::span<float> data, const CallOptions& options) {
  const int count = as_count(static_cast<int64_t>(data.size()), options.label);
  MPI_Request req = MPI_REQUEST_NULL;
  check_mpi(
      MPI_Iallreduce(MPI_IN_PLACE, data.data(), count, MPI_FLOAT, MPI_SUM, comm.handle(), &req),
      "MPI_Iallreduce");
  wait_all({&req, 1}, comm, "all_reduce", options);
}

void broadcast(const Comm& comm, std::span<std::byte> data, int root, const CallOptions& options) {
  if (root < 0 || root >= comm.size()) {
    throw Error(options.label, "broadcast root " + std::to_string(root) + " is not a member");
  }
  const int count = as_count(static_cast<int64_t>(data.size()), options.label);
  MPI_Request req = MPI_REQUEST_NULL;
  check_mpi(MPI_Ibcast(data.data(), count, MPI_BYTE, root, comm.handle(), &req), "MPI_Ibcast");
  wait_all({&req, 1}, comm, "broadcast from rank " + std::to_string(comm.global_rank(root)),
           options);
}

}  // namespace moecomm::rt
