#include "rt/routed_a2a.h"

#include <climits>
#include <cstring>
#include <string>
#include <unordered_map>

#include "core/error.h"

namespace moecomm::rt {
namespace {

// Steps use distinct tags (modulo kStepTags) so a fast peer's next step is never taken for
// this one; messages between two members match in the order sent (MPI's non-overtaking rule).
constexpr int kStepTag = 7100;
constexpr size_t kStepTags = 4096;

using sched::RoutedTransfer;
using sched::RoutingStep;

// The blocks a member holds, keyed by (src, dst) member.
class BlockStore {
 public:
  explicit BlockStore(int n) : n_(n) {}
  std::vector<std::byte>& at(int src, int dst) { return blocks_[key(src, dst)]; }
  std::vector<std::byte> take(int src, int dst) {
    const auto it = blocks_.find(key(src, dst));
    if (it == blocks_.end()) return {};
    std::vector<std::byte> out = std::move(it->second);
    blocks_.erase(it);
    return out;
  }

 private:
  int64_t key(int src, int dst) const { return int64_t(src) * n_ + dst; }
  int n_;
  std::unordered_map<int64_t, std::vector<std::byte>> blocks_;
};

int64_t transfer_bytes(const RoutedTransfer& t, const std::vector<int64_t>& counts, int n) {
  int64_t sum = 0;
  for (const auto& [src, dst] : t.blocks) sum += counts[size_t(src) * n + dst];
  return sum;
}

std::vector<int64_t> exchange_counts(const Comm& comm, std::span<const int64_t> send_counts,
                                     const CallOptions& options) {
  const int n = comm.size();
  std::vector<int64_t> counts(size_t(n) * n);
  MPI_Request req = MPI_REQUEST_NULL;
  check_mpi(MPI_Iallgather(send_counts.data(), n, MPI_INT64_T, counts.data(), n, MPI_INT64_T,
                           comm.handle(), &req),
            "MPI_Iallgather");
  wait_all({&req, 1}, comm, "routed all_to_all_v counts exchange", options);
  return counts;
}

// One step: pack and send this member's transfers, receive the others', unpack.
void run_step(const Comm& comm, const RoutingStep& step, size_t step_index,
              const std::vector<int64_t>& counts, BlockStore& store, const CallOptions& options) {
  const int n = comm.size(), me = comm.rank();
  const int tag = kStepTag + static_cast<int>(step_index % kStepTags);
  std::vector<std::vector<std::byte>> out, in;
  std::vector<const RoutedTransfer*> incoming;
  std::vector<MPI_Request> reqs;
  for (const RoutedTransfer& t : step) {
    const int64_t bytes = transfer_bytes(t, counts, n);
    if (bytes == 0 || (t.from != me && t.to != me)) continue;
    if (bytes > INT_MAX) throw Error(options.label, "a routed A2A message exceeds 2 GiB");
    std::vector<std::byte>& buf = (t.from == me ? out : in).emplace_back();
    if (t.from == me) {
      for (const auto& [src, dst] : t.blocks) {
        const std::vector<std::byte> b = store.take(src, dst);
        buf.insert(buf.end(), b.begin(), b.end());
      }
      if (options.bytes) {
        options.bytes->add(comm.my_global_rank(), comm.global_rank(t.to), bytes,
                           options.ranks_per_node);
      }
    } else {
      buf.resize(size_t(bytes));
      incoming.push_back(&t);
    }
    reqs.emplace_back();
    const int count = static_cast<int>(bytes);
    check_mpi(
        t.from == me
            ? MPI_Isend(buf.data(), count, MPI_BYTE, t.to, tag, comm.handle(), &reqs.back())
            : MPI_Irecv(buf.data(), count, MPI_BYTE, t.from, tag, comm.handle(), &reqs.back()),
        t.from == me ? "MPI_Isend" : "MPI_Irecv");
  }
  wait_all(reqs, comm, "routed all_to_all_v step " + std::to_string(step_index), options);
  for (size_t i = 0; i < incoming.size(); ++i) {
    size_t at = 0;
    for (const auto& [src, dst] : incoming[i]->blocks) {
      const size_t len = size_t(counts[size_t(src) * n + dst]);
      store.at(src, dst).assign(in[i].begin() + at, in[i].begin() + at + len);
      at += len;
    }
  }
}

}  // namespace

Received<std::byte> routed_all_to_all(const Comm& comm, std::span<const std::byte> send,
                                      std::span<const int64_t> send_counts,
                                      const std::vector<RoutingStep>& steps,
                                      const CallOptions& options) {
  const int n = comm.size(), me = comm.rank();
  const std::vector<int64_t> counts = exchange_counts(comm, send_counts, options);
  BlockStore store(n);
  size_t at = 0;
  for (int j = 0; j < n; ++j) {
    const size_t len = size_t(send_counts[j]);
    store.at(me, j).assign(send.begin() + at, send.begin() + at + len);
    at += len;
  }
  if (options.bytes) {
    options.bytes->add(comm.my_global_rank(), comm.my_global_rank(), send_counts[me],
                       options.ranks_per_node);
  }
  for (size_t p = 0; p < steps.size(); ++p) {
    run_step(comm, steps[p], p, counts, store, options);
  }
  Received<std::byte> out;
  for (int src = 0; src < n; ++src) {
    const std::vector<std::byte> b = store.take(src, me);
    if (static_cast<int64_t>(b.size()) != counts[size_t(src) * n + me]) {
      throw std::logic_error("routed all_to_all_v lost the block from member " +
                             std::to_string(src));
    }
    out.data.insert(out.data.end(), b.begin(), b.end());
    out.counts.push_back(static_cast<int64_t>(b.size()));
  }
  return out;
}

}  // namespace moecomm::rt
