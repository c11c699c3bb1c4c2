#include "rt/collectives.h"

#include <algorithm>
#include <climits>
#include <numeric>
#include <string>

#include "core/error.h"
#include "rt/routed_a2a.h"

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
                                    std::span<const int64_t> recv_counts,
                                    const CallOptions& options) {
  const int n = comm.size();
  std::vector<int> sc(n), rc(n);
  for (int j = 0; j < n; ++j) sc[j] = static_cast<int>(send_counts[j]);
  MPI_Request req = MPI_REQUEST_NULL;
  if (recv_counts.empty()) {
    check_mpi(MPI_Ialltoall(sc.data(), 1, MPI_INT, rc.data(), 1, MPI_INT, comm.handle(), &req),
              "MPI_Ialltoall");
    wait_all({&req, 1}, comm, "all_to_all_v counts exchange", options);
  } else {
    for (int j = 0; j < n; ++j) rc[j] = as_count(recv_counts[j], options.label);
  }
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

// Counts of a -v collective: one per member, each a valid MPI count; returns them as int.
std::vector<int> member_counts(const Comm& comm, std::span<const int64_t> counts,
                               const std::string& what, const std::string& label) {
  if (counts.size() != static_cast<size_t>(comm.size())) {
    throw Error(label, what + " needs " + std::to_string(comm.size()) + " counts, got " +
                           std::to_string(counts.size()));
  }
  std::vector<int> out;
  for (int64_t c : counts) out.push_back(as_count(c, label));
  return out;
}

// Logical bytes (header comment of collectives.h): `bytes_to(j)` to each other member j.
template <class F>
void count_to_others(const Comm& comm, const CallOptions& options, F bytes_to) {
  if (!options.bytes) return;
  for (int j = 0; j < comm.size(); ++j) {
    if (j == comm.rank()) continue;
    options.bytes->add(comm.my_global_rank(), comm.global_rank(j), bytes_to(j),
                       options.ranks_per_node);
  }
}

// Floats of block j of n equal blocks of `count` (the AllReduce's logical blocks).
int64_t even_block(int64_t count, int j, int n) {
  return count * (j + 1) / n - count * j / n;
}

// A ring's block index: block b modulo n, for b counted down from a member's own.
size_t ring_block(int b, int n) {
  return static_cast<size_t>((b % n + n) % n);
}

// One step of a ring (AllGather, ReduceScatter): `count` elements of `type` go to the next
// member while as many come from the previous one; the bytes sent count on the link to the
// next member.
void ring_step(const Comm& comm, const void* send, void* recv, int count, MPI_Datatype type,
               int tag, const std::string& what, const CallOptions& options) {
  const int n = comm.size(), me = comm.rank();
  const int next = (me + 1) % n, prev = (me + n - 1) % n;
  MPI_Request reqs[2];
  check_mpi(MPI_Irecv(recv, count, type, prev, tag, comm.handle(), &reqs[0]), "MPI_Irecv");
  check_mpi(MPI_Isend(send, count, type, next, tag, comm.handle(), &reqs[1]), "MPI_Isend");
  wait_all(reqs, comm, what, options);
  if (options.bytes) {
    int size = 0;
    check_mpi(MPI_Type_size(type, &size), "MPI_Type_size");
    options.bytes->add(comm.my_global_rank(), comm.global_rank(next), int64_t{count} * size,
                       options.ranks_per_node);
  }
}

}  // namespace

Received<std::byte> all_to_all_v(const Comm& comm, std::span<const std::byte> send,
                                 std::span<const int64_t> send_counts, sched::Algorithm algorithm,
                                 const CallOptions& options, std::span<const int64_t> recv_counts) {
  check_counts(comm, send.size(), send_counts, options.label);
  if (!recv_counts.empty() && recv_counts.size() != static_cast<size_t>(comm.size())) {
    throw Error(options.label, "all_to_all_v needs " + std::to_string(comm.size()) +
                                   " receive counts, got " + std::to_string(recv_counts.size()));
  }
  if (comm.size() == 1) {  // e.g. HybridEP's token group when one domain holds every expert
    if (!recv_counts.empty() && recv_counts[0] != send_counts[0])
      throw Error(options.label,
                  "all_to_all_v: the given receive count differs from what the "
                  "one member sends");
    if (options.bytes)
      options.bytes->add(comm.my_global_rank(), comm.my_global_rank(), send_counts[0],
                         options.ranks_per_node);
    // No MPI call: a wait on a request that is not done at once costs a trip through the
    // scheduler on oversubscribed cores, for nothing to move (the simulator charges 0).
    return {std::vector<std::byte>(send.begin(), send.end()), {send_counts[0]}};
  }
  const auto routing = sched::cached_a2a_routing(
      algorithm, comm.group(), options.ranks_per_node > 0 ? options.ranks_per_node : 1);
  if (routing->direct()) return flat_all_to_all(comm, send, send_counts, recv_counts, options);
  Received<std::byte> out = routed_all_to_all(comm, send, send_counts, routing->steps, options);
  if (!recv_counts.empty() &&
      !std::equal(out.counts.begin(), out.counts.end(), recv_counts.begin())) {
    throw Error(options.label,
                "all_to_all_v: the given receive counts differ from what the members send");
  }
  return out;
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
  count_to_others(comm, options, [&](int) { return static_cast<int64_t>(mine.size()); });
}

void ring_all_gather(const Comm& comm, std::span<const std::byte> mine, std::span<std::byte> out,
                     const CallOptions& options) {
  const int n = comm.size(), me = comm.rank();
  const size_t c = mine.size();
  if (out.size() != c * n) {
    throw Error(options.label, "ring all_gather output must hold " + std::to_string(n) +
                                   " blocks of " + std::to_string(c) + " bytes");
  }
  const int count = as_count(static_cast<int64_t>(c), options.label);
  auto block = [&](int b) { return out.subspan(ring_block(b, n) * c, c); };
  std::copy(mine.begin(), mine.end(), block(me).begin());
  for (int step = 0; step + 1 < n; ++step)  // pass on block me - step, get me - step - 1
    ring_step(comm, block(me - step).data(), block(me - step - 1).data(), count, MPI_BYTE, 7301,
              "ring all_gather step " + std::to_string(step), options);
}

void all_gather_v(const Comm& comm, std::span<const std::byte> mine,
                  std::span<const int64_t> counts, std::span<std::byte> out,
                  const CallOptions& options) {
  const std::vector<int> rc = member_counts(comm, counts, "all_gather_v", options.label);
  if (mine.size() != static_cast<size_t>(rc[comm.rank()])) {
    throw Error(options.label, "all_gather_v: this member gives " + std::to_string(mine.size()) +
                                   " bytes but its count is " + std::to_string(rc[comm.rank()]));
  }
  const std::vector<int> displs = displacements(rc, options.label);
  if (out.size() != static_cast<size_t>(displs.back()) + rc.back()) {
    throw Error(options.label, "all_gather_v output must hold the sum of the counts");
  }
  MPI_Request req = MPI_REQUEST_NULL;
  check_mpi(MPI_Iallgatherv(mine.data(), rc[comm.rank()], MPI_BYTE, out.data(), rc.data(),
                            displs.data(), MPI_BYTE, comm.handle(), &req),
            "MPI_Iallgatherv");
  wait_all({&req, 1}, comm, "all_gather_v", options);
  count_to_others(comm, options, [&](int) { return static_cast<int64_t>(mine.size()); });
}

namespace {

// A ReduceScatter's block: the input split into one equal block per member.
size_t scatter_block(const Comm& comm, std::span<const float> in, const CallOptions& options) {
  const size_t n = static_cast<size_t>(comm.size());
  if (in.size() % n != 0) {
    throw Error(options.label, "reduce_scatter input of " + std::to_string(in.size()) +
                                   " floats does not split into " + std::to_string(n) +
                                   " equal blocks");
  }
  return in.size() / n;
}

}  // namespace

std::vector<float> reduce_scatter_sum(const Comm& comm, std::span<const float> in,
                                      const CallOptions& options) {
  std::vector<float> out(scatter_block(comm, in, options));
  const int count = as_count(static_cast<int64_t>(out.size()), options.label);
  MPI_Request req = MPI_REQUEST_NULL;
  check_mpi(MPI_Ireduce_scatter_block(in.data(), out.data(), count, MPI_FLOAT, MPI_SUM,
                                      comm.handle(), &req),
            "MPI_Ireduce_scatter_block");
  wait_all({&req, 1}, comm, "reduce_scatter", options);
  count_to_others(comm, options,
                  [&](int) { return static_cast<int64_t>(out.size() * sizeof(float)); });
  return out;
}

std::vector<float> ring_reduce_scatter_sum(const Comm& comm, std::span<const float> in,
                                           const CallOptions& options) {
  const int n = comm.size(), me = comm.rank();
  const size_t c = scatter_block(comm, in, options);
  const int count = as_count(static_cast<int64_t>(c), options.label);
  auto block = [&](int b) { return in.subspan(ring_block(b, n) * c, c); };
  const std::span<const float> first = block(me - 1);
  std::vector<float> send(first.begin(), first.end()), recv(c);
  for (int step = 0; step + 1 < n; ++step) {  // receive block me - step - 2's partial sum
    ring_step(comm, send.data(), recv.data(), count, MPI_FLOAT, 7300,
              "ring reduce_scatter step " + std::to_string(step), options);
    const std::span<const float> mine = block(me - step - 2);
    for (size_t i = 0; i < c; ++i) send[i] = recv[i] + mine[i];
  }
  return send;  // after n - 1 steps: block me, summed over every member
}

std::vector<float> reduce_scatter_v(const Comm& comm, std::span<const float> in,
                                    std::span<const int64_t> counts, const CallOptions& options) {
  const std::vector<int> rc = member_counts(comm, counts, "reduce_scatter_v", options.label);
  const std::vector<int> displs = displacements(rc, options.label);
  if (in.size() != static_cast<size_t>(displs.back()) + rc.back()) {
    throw Error(options.label, "reduce_scatter_v input of " + std::to_string(in.size()) +
                                   " floats differs from the sum of the counts");
  }
  std::vector<float> out(static_cast<size_t>(rc[comm.rank()]));
  float none = 0;  // a valid address for empty buffers
  MPI_Request req = MPI_REQUEST_NULL;
  check_mpi(MPI_Ireduce_scatter(in.empty() ? &none : in.data(), out.empty() ? &none : out.data(),
                                rc.data(), MPI_FLOAT, MPI_SUM, comm.handle(), &req),
            "MPI_Ireduce_scatter");
  wait_all({&req, 1}, comm, "reduce_scatter_v", options);
  count_to_others(comm, options,
                  [&](int j) { return static_cast<int64_t>(rc[j]) * int64_t{sizeof(float)}; });
  return out;
}

namespace {

void count_all_reduce(const Comm& comm, int64_t count, const CallOptions& options) {
  const int n = comm.size(), me = comm.rank();
  count_to_others(comm, options, [&](int j) {  // ReduceScatter's block j, AllGather's own block
    return (even_block(count, j, n) + even_block(count, me, n)) * int64_t{sizeof(float)};
  });
}

}  // namespace

void all_reduce_sum(const Comm& comm, std::span<float> data, const CallOptions& options) {
  if (static_cast<int64_t>(data.size_bytes()) >= kRingAllReduceBytes) {
    ring_all_reduce_sum(comm, data, options);
    return;
  }
  const int count = as_count(static_cast<int64_t>(data.size()), options.label);
  MPI_Request req = MPI_REQUEST_NULL;
  check_mpi(
      MPI_Iallreduce(MPI_IN_PLACE, data.data(), count, MPI_FLOAT, MPI_SUM, comm.handle(), &req),
      "MPI_Iallreduce");
  wait_all({&req, 1}, comm, "all_reduce", options);
  count_all_reduce(comm, count, options);
}

void ring_all_reduce_sum(const Comm& comm, std::span<float> data, const CallOptions& options) {
  const int n = comm.size();
  if (n == 1) return;  // the sum is the data; nothing is sent
  const size_t block = (data.size() + n - 1) / n;
  std::vector<float> padded(block * n, 0.0f);
  std::copy(data.begin(), data.end(), padded.begin());
  CallOptions quiet = options;  // counted once below, as the simulator's AllReduce
  quiet.bytes = nullptr;
  const std::vector<float> mine = ring_reduce_scatter_sum(comm, padded, quiet);
  ring_all_gather(comm, std::as_bytes(std::span<const float>(mine)),
                  std::as_writable_bytes(std::span<float>(padded)), quiet);
  std::copy(padded.begin(), padded.begin() + static_cast<ptrdiff_t>(data.size()), data.begin());
  count_all_reduce(comm, static_cast<int64_t>(data.size()), options);
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
