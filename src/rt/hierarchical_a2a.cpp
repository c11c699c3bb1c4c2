#include "rt/hierarchical_a2a.h"

#include <climits>
#include <cstring>
#include <map>
#include <string>
#include <unordered_map>

#include "core/error.h"

namespace moecomm::rt {
namespace {

constexpr int kPhaseTag = 7100;  // phases use distinct tags so a fast peer cannot cross phases

using Blocks = std::vector<std::pair<int, int>>;

void add(ExchangePhase& phase, int from, int to, Blocks blocks) {
  if (from != to && !blocks.empty()) phase.push_back({from, to, std::move(blocks)});
}

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

int64_t transfer_bytes(const Transfer& t, const std::vector<int64_t>& counts, int n) {
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
  wait_all({&req, 1}, comm, "hierarchical all_to_all_v counts exchange", options);
  return counts;
}

// One phase: pack and send this member's transfers, receive the others', unpack.
void run_phase(const Comm& comm, const ExchangePhase& phase, int tag,
               const std::vector<int64_t>& counts, BlockStore& store, const CallOptions& options) {
  const int n = comm.size(), me = comm.rank();
  std::vector<std::vector<std::byte>> out, in;
  std::vector<const Transfer*> incoming;
  std::vector<MPI_Request> reqs;
  for (const Transfer& t : phase) {
    const int64_t bytes = transfer_bytes(t, counts, n);
    if (bytes == 0 || (t.from != me && t.to != me)) continue;
    if (bytes > INT_MAX) throw Error(options.label, "a hierarchical A2A message exceeds 2 GiB");
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
  wait_all(reqs, comm, "hierarchical all_to_all_v phase " + std::to_string(tag - kPhaseTag),
           options);
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

std::vector<std::vector<int>> members_by_node(const core::RankGroup& group, int ranks_per_node) {
  const int rpn = ranks_per_node > 0 ? ranks_per_node : 1;
  std::map<int, std::vector<int>> by_node;
  for (int i = 0; i < static_cast<int>(group.size()); ++i) by_node[group[i] / rpn].push_back(i);
  std::vector<std::vector<int>> nodes;
  for (auto& [node, members] : by_node) {
    if (!nodes.empty() && members.size() != nodes.front().size()) return {};
    nodes.push_back(std::move(members));
  }
  return nodes;
}

std::vector<ExchangePhase> two_dh_plan(const std::vector<std::vector<int>>& nodes) {
  const size_t local = nodes.front().size();
  ExchangePhase intra, inter;
  for (const auto& node : nodes) {
    for (size_t a = 0; a < local; ++a) {
      for (size_t l = 0; l < local; ++l) {  // node[a] -> node[l]: its blocks for index l
        Blocks blocks;
        for (const auto& dst_node : nodes) blocks.emplace_back(node[a], dst_node[l]);
        add(intra, node[a], node[l], std::move(blocks));
      }
    }
  }
  for (size_t x = 0; x < nodes.size(); ++x) {
    for (size_t y = 0; y < nodes.size(); ++y) {
      for (size_t l = 0; l < local && x != y; ++l) {  // node x's index l -> node y's index l
        Blocks blocks;
        for (int src : nodes[x]) blocks.emplace_back(src, nodes[y][l]);
        add(inter, nodes[x][l], nodes[y][l], std::move(blocks));
      }
    }
  }
  return {intra, inter};
}

std::vector<ExchangePhase> one_dh_plan(const std::vector<std::vector<int>>& nodes) {
  ExchangePhase gather, leaders, scatter;
  for (size_t x = 0; x < nodes.size(); ++x) {
    const int leader = nodes[x].front();
    for (int a : nodes[x]) {
      std::map<int, Blocks> to;  // on-node blocks go directly, off-node ones to the leader
      for (size_t y = 0; y < nodes.size(); ++y) {
        for (int b : nodes[y]) to[y == x ? b : leader].emplace_back(a, b);
      }
      for (auto& [dst, blocks] : to) add(gather, a, dst, std::move(blocks));
    }
    for (size_t y = 0; y < nodes.size(); ++y) {
      Blocks blocks;
      for (int a : nodes[x]) {
        for (int b : nodes[y]) blocks.emplace_back(a, b);
      }
      if (y != x) add(leaders, leader, nodes[y].front(), std::move(blocks));
    }
    for (int b : nodes[x]) {
      Blocks blocks;
      for (size_t y = 0; y < nodes.size(); ++y) {
        for (int a : nodes[y]) {
          if (y != x) blocks.emplace_back(a, b);
        }
      }
      add(scatter, leader, b, std::move(blocks));
    }
  }
  return {gather, leaders, scatter};
}

Received<std::byte> routed_all_to_all(const Comm& comm, std::span<const std::byte> send,
                                      std::span<const int64_t> send_counts,
                                      const std::vector<ExchangePhase>& plan,
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
  for (size_t p = 0; p < plan.size(); ++p) {
    run_phase(comm, plan[p], kPhaseTag + static_cast<int>(p), counts, store, options);
  }
  Received<std::byte> out;
  for (int src = 0; src < n; ++src) {
    const std::vector<std::byte> b = store.take(src, me);
    if (static_cast<int64_t>(b.size()) != counts[size_t(src) * n + me]) {
      throw std::logic_error("hierarchical all_to_all_v lost the block from member " +
                             std::to_string(src));
    }
    out.data.insert(out.data.end(), b.begin(), b.end());
    out.counts.push_back(static_cast<int64_t>(b.size()));
  }
  return out;
}

}  // namespace moecomm::rt
