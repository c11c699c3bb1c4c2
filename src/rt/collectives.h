#pragma once
// Collectives on real buffers over a Comm, each issued non-blocking and polled against the
// call's deadline (wait.h). Data types: raw bytes and any trivially copyable T for data
// movement; fp32 for the reductions (sum).
//
// Bytes sent (CallOptions::bytes, by link level of the pair of global ranks) are the logical
// bytes each member must send whatever MPI's algorithm, so that runs compare with the
// simulator's per-level traffic:
//   A2A-v: block j to member j, every j (the diagonal counts as same-device).
//   AllGather(-v): this member's block to each of the n - 1 other members.
//   ReduceScatter(-v): block j to member j, for every j != me.
//   AllReduce: as ReduceScatter + AllGather of n equal blocks (block j: floats
//     [floor(c j / n), floor(c (j + 1) / n)) of c): block j to member j, then this member's
//     block to every other member; 2 (n - 1) / n of the buffer, even over the other members.
//   Broadcast: not counted.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <type_traits>
#include <vector>

#include "rt/wait.h"
#include "sched/op.h"

namespace moecomm::rt {

// What an A2A-v delivered: the blocks of every source member back to back, in member order;
// counts[i] is the number of elements that came from member i.
template <class T>
struct Received {
  std::vector<T> data;
  std::vector<int64_t> counts;
};

// A2A-v: `send` holds the blocks for members 0..n-1 back to back, send_counts[j] bytes for
// member j. Counts are exchanged first (MPI_Alltoall), then the data (MPI_Alltoallv), unless
// the caller passes recv_counts (recv_counts[i] bytes from member i, as the token paths know
// from their routing counts): the flat A2A is then one collective, one latency less, as the
// simulator models it. It trusts them and returns them as Received::counts: one smaller than
// what the member sends is an MPI truncation (the job aborts), a larger one goes undetected.
// Algorithms whose routing plan (sched/a2a_routing.h) is not one direct step run it with
// point-to-point messages (routed_a2a.h); routing needs every pair's count, so they always
// gather the counts, and throw Error where given recv_counts differ. They deliver exactly
// what kFlat delivers. Bytes sent are counted by
// link level when asked.
Received<std::byte> all_to_all_v(const Comm& comm, std::span<const std::byte> send,
                                 std::span<const int64_t> send_counts, sched::Algorithm algorithm,
                                 const CallOptions& options,
                                 std::span<const int64_t> recv_counts = {});

template <class T>
Received<T> all_to_all_v(const Comm& comm, std::span<const T> send,
                         std::span<const int64_t> send_counts, sched::Algorithm algorithm,
                         const CallOptions& options, std::span<const int64_t> recv_counts = {}) {
  static_assert(std::is_trivially_copyable_v<T>);
  auto bytes_of = [](std::span<const int64_t> counts) {
    std::vector<int64_t> out(counts.begin(), counts.end());
    for (int64_t& c : out) c *= static_cast<int64_t>(sizeof(T));
    return out;
  };
  const std::vector<int64_t> send_bytes = bytes_of(send_counts), recv_bytes = bytes_of(recv_counts);
  Received<std::byte> raw =
      all_to_all_v(comm, std::as_bytes(send), send_bytes, algorithm, options, recv_bytes);
  Received<T> out{std::vector<T>(raw.data.size() / sizeof(T)), std::move(raw.counts)};
  if (!raw.data.empty()) std::memcpy(out.data.data(), raw.data.data(), raw.data.size());
  for (int64_t& c : out.counts) c /= static_cast<int64_t>(sizeof(T));
  return out;
}

// AllGather: every member contributes `mine` (equal sizes); `out` gets member i's block at
// i * mine.size(). out.size() must be n * mine.size().
void all_gather(const Comm& comm, std::span<const std::byte> mine, std::span<std::byte> out,
                const CallOptions& options);

template <class T>
std::vector<T> all_gather(const Comm& comm, std::span<const T> mine, const CallOptions& options) {
  static_assert(std::is_trivially_copyable_v<T>);
  std::vector<T> out(mine.size() * comm.size());
  all_gather(comm, std::as_bytes(mine), std::as_writable_bytes(std::span<T>(out)), options);
  return out;
}

// AllGather-v: member i contributes counts[i] bytes (every member passes the same counts and
// mine.size() == counts[comm.rank()]); `out` gets the blocks member-major, sum(counts) bytes.
void all_gather_v(const Comm& comm, std::span<const std::byte> mine,
                  std::span<const int64_t> counts, std::span<std::byte> out,
                  const CallOptions& options);

template <class T>
std::vector<T> all_gather_v(const Comm& comm, std::span<const T> mine,
                            std::span<const int64_t> counts, const CallOptions& options) {
  static_assert(std::is_trivially_copyable_v<T>);
  std::vector<int64_t> byte_counts(counts.begin(), counts.end());
  int64_t total = 0;
  for (int64_t& c : byte_counts) {
    total += c;
    c *= static_cast<int64_t>(sizeof(T));
  }
  std::vector<T> out(static_cast<size_t>(total > 0 ? total : 0));
  all_gather_v(comm, std::as_bytes(mine), std::span<const int64_t>(byte_counts),
               std::as_writable_bytes(std::span<T>(out)), options);
  return out;
}

// The same as a ring (NCCL's, and the simulator's model): n - 1 steps, each member passing
// the block it received last to the next. Each link of the ring carries (n - 1) / n of the
// output once, where MPI's AllGather (Open MPI's linear or recursive doubling) crosses a link
// between two halves of the group with (n / 2)^2 blocks. Bytes are counted as sent: n - 1
// blocks to the next member.
void ring_all_gather(const Comm& comm, std::span<const std::byte> mine, std::span<std::byte> out,
                     const CallOptions& options);

// ReduceScatter (sum): `in` holds n equal blocks; member i gets the sum of everyone's block i.
std::vector<float> reduce_scatter_sum(const Comm& comm, std::span<const float> in,
                                      const CallOptions& options);

// The same as a ring (NCCL's, and the simulator's model): n - 1 steps, each member sending
// one block's partial sum to the next. Each link of the ring carries (n - 1) / n of the
// input once, where MPI's recursive halving may cross a slow link with half of it at once.
std::vector<float> ring_reduce_scatter_sum(const Comm& comm, std::span<const float> in,
                                           const CallOptions& options);

// ReduceScatter-v (fp32 sum): `in` holds n blocks back to back, counts[j] floats for member j
// (the same counts on every member); member i gets the sum of everyone's block i.
std::vector<float> reduce_scatter_v(const Comm& comm, std::span<const float> in,
                                    std::span<const int64_t> counts, const CallOptions& options);

// AllReduce (sum), in place. From kRingAllReduceBytes on, a ring (ring_all_reduce_sum), as
// the simulator models it and NCCL runs it; below, MPI's (latency-bound sizes, where Open MPI
// takes a binomial tree). Bytes are counted as the simulator's AllReduce: to each other member
// its ReduceScatter block and this member's AllGather block.
void all_reduce_sum(const Comm& comm, std::span<float> data, const CallOptions& options);

// libnbc's own boundary between small and large AllReduces.
inline constexpr int64_t kRingAllReduceBytes = 64 * 1024;

// A ring ReduceScatter, then a ring AllGather, over n blocks of the data zero-padded to a
// multiple of n: each link of the ring carries 2 (n - 1) / n of the data. Open MPI's in-place
// MPI_Iallreduce is a binomial tree whose levels each move all of it, one after the other.
// The result is the same on every member. Bytes are counted as all_reduce_sum's.
void ring_all_reduce_sum(const Comm& comm, std::span<float> data, const CallOptions& options);

// Broadcast from member `root` (an index into the group), in place.
void broadcast(const Comm& comm, std::span<std::byte> data, int root, const CallOptions& options);

template <class T>
void broadcast(const Comm& comm, std::span<T> data, int root, const CallOptions& options) {
  static_assert(std::is_trivially_copyable_v<T>);
  broadcast(comm, std::as_writable_bytes(data), root, options);
}

}  // namespace moecomm::rt
