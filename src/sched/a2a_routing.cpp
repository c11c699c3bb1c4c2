#include "sched/a2a_routing.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <string>
#include <tuple>

#include "core/error.h"

namespace moecomm::sched {
namespace {

using Nodes = std::vector<std::vector<int>>;
using Blocks = std::vector<Block>;

void add(RoutingStep& step, int from, int to, Blocks blocks) {
  if (from != to && !blocks.empty()) step.push_back({from, to, std::move(blocks)});
}

RoutingStep flat_step(int n) {
  RoutingStep step;
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < n; ++j) add(step, i, j, {{i, j}});
  }
  return step;
}

std::vector<RoutingStep> flat(int n, const Nodes&, A2ADirection) {
  return {flat_step(n)};
}

std::vector<RoutingStep> pairwise(int n, const Nodes&, A2ADirection) {
  std::vector<RoutingStep> steps;
  for (int k = 1; k < n; ++k) {
    RoutingStep step;
    for (int i = 0; i < n; ++i) add(step, i, (i + k) % n, {{i, (i + k) % n}});
    steps.push_back(std::move(step));
  }
  return steps;
}

std::vector<RoutingStep> two_dh(int, const Nodes& nodes, A2ADirection) {
  const size_t local = nodes.front().size();
  RoutingStep intra, inter;
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

std::vector<RoutingStep> one_dh(int, const Nodes& nodes, A2ADirection) {
  RoutingStep gather, leaders, scatter;
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

// Dispatch: step 1 sends each token once to every other member of its node that holds one of
// its experts and once to every other node, to the counterpart there (node blocks: the
// member's own rows); step 2 fans the crossed tokens out inside the node (pair blocks).
// Combine, the other way: step 1 brings the outputs for off-node tokens to their counterpart
// here (pair blocks); step 2 crosses once per token and node, and sends on-node outputs home.
std::vector<RoutingStep> dedup(int, const Nodes& nodes, A2ADirection direction) {
  const bool dispatch = direction == A2ADirection::kDispatch;
  const size_t local = nodes.front().size();
  RoutingStep first, second;
  for (size_t x = 0; x < nodes.size(); ++x) {
    for (size_t l = 0; l < local; ++l) {
      const int a = nodes[x][l];
      RoutingStep& cross = dispatch ? first : second;  // on-node rows go beside the crossing
      for (int b : nodes[x])  // on-node: straight, as node blocks (their rows once per rank)
        if (b != a)
          cross.push_back(
              {dispatch ? a : b, dispatch ? b : a, {}, {{dispatch ? a : b, dispatch ? b : a}}});
      for (size_t y = 0; y < nodes.size(); ++y) {
        if (y == x) continue;
        const int c = nodes[y][l];  // a's counterpart on node y
        cross.push_back(
            {dispatch ? a : c, dispatch ? c : a, {}, {{dispatch ? a : c, dispatch ? c : a}}});
        for (int b : nodes[y]) {  // c fans a's tokens out to b (dispatch) or gathers b's outputs
          if (b == c) continue;
          RoutingStep& fan = dispatch ? second : first;
          const Block block = dispatch ? Block{a, b} : Block{b, a};
          const int from = dispatch ? c : b, to = dispatch ? b : c;
          auto it = std::find_if(fan.begin(), fan.end(), [&](const RoutedTransfer& t) {
            return t.from == from && t.to == to && t.node_blocks.empty();
          });
          if (it == fan.end())
            fan.push_back({from, to, {block}});
          else
            it->blocks.push_back(block);
        }
      }
    }
  }
  return {first, second};
}

struct A2ARoutingEntry {
  A2AAlgorithmInfo info;
  bool hierarchical;  // needs equal nodes, at least two; else the flat plan runs
  std::vector<RoutingStep> (*plan)(int members, const Nodes& nodes, A2ADirection direction);
};

// The one table of A2A algorithms: the a2a knob, the executors and the simulator read it.
const std::vector<A2ARoutingEntry>& entries() {
  static const std::vector<A2ARoutingEntry> table = {
      {{Algorithm::kFlat, "flat"}, false, flat},
      {{Algorithm::k1DH, "1dh"}, true, one_dh},
      {{Algorithm::k2DH, "2dh"}, true, two_dh},
      {{Algorithm::kPairwise, "pairwise"}, false, pairwise},
      {{Algorithm::kDedup, "dedup", false}, true, dedup},
  };
  return table;
}

const A2ARoutingEntry* find(Algorithm algorithm) {
  for (const A2ARoutingEntry& e : entries()) {
    if (e.info.algorithm == algorithm) return &e;
  }
  return nullptr;
}

void check_ranks_per_node(int ranks_per_node) {
  if (ranks_per_node < 1)
    throw Error("a2a routing",
                "ranks per node must be at least 1, got " + std::to_string(ranks_per_node));
}

}  // namespace

bool A2ARouting::direct() const {
  if (steps.size() > 1) return false;
  for (const RoutedTransfer& t : steps.empty() ? RoutingStep{} : steps.front()) {
    if (t.blocks.size() != 1 || t.blocks[0] != Block{t.from, t.to}) return false;
  }
  return true;
}

std::vector<Block> A2ARouting::node_block_pairs(Block node_block) const {
  const auto [from, to] = node_block;
  if (from < 0 || to < 0 || from >= members || to >= members || node.empty())
    throw Error("a2a routing", "(" + std::to_string(from) + ", " + std::to_string(to) +
                                   ") is not a node block of this plan");
  if (node[size_t(from)] == node[size_t(to)]) return {node_block};
  const bool dispatch = direction == A2ADirection::kDispatch;
  const int far = dispatch ? to : from;
  std::vector<Block> pairs;
  for (int m = 0; m < members; ++m)
    if (node[size_t(m)] == node[size_t(far)]) pairs.push_back(dispatch ? Block{from, m} : Block{m, to});
  return pairs;
}

const std::vector<A2AAlgorithmInfo>& a2a_algorithms() {
  static const std::vector<A2AAlgorithmInfo> infos = [] {
    std::vector<A2AAlgorithmInfo> out;
    for (const A2ARoutingEntry& e : entries()) out.push_back(e.info);
    return out;
  }();
  return infos;
}

bool is_a2a_algorithm(Algorithm algorithm) {
  return find(algorithm) != nullptr;
}

std::vector<std::vector<int>> members_by_node(const core::RankGroup& group, int ranks_per_node) {
  check_ranks_per_node(ranks_per_node);
  std::map<int, std::vector<int>> by_node;
  for (int i = 0; i < static_cast<int>(group.size()); ++i)
    by_node[group[i] / ranks_per_node].push_back(i);
  std::vector<std::vector<int>> nodes;
  for (auto& [node, members] : by_node) {
    if (!nodes.empty() && members.size() != nodes.front().size()) return {};
    nodes.push_back(std::move(members));
  }
  return nodes;
}

A2ARouting a2a_routing(Algorithm algorithm, const core::RankGroup& group, int ranks_per_node,
                       A2ADirection direction) {
  const A2ARoutingEntry* entry = find(algorithm);
  if (!entry)
    throw Error("a2a routing",
                "'" + std::string(to_string(algorithm)) + "' is not an all-to-all algorithm");
  if (ranks_per_node < 1)
    throw Error("a2a routing",
                "ranks per node must be at least 1, got " + std::to_string(ranks_per_node));
  const int n = static_cast<int>(group.size());
  A2ARouting out{.algorithm = algorithm, .members = n, .steps = {}};
  Nodes nodes;
  if (entry->hierarchical) {
    nodes = members_by_node(group, ranks_per_node);
    if (nodes.size() < 2) {  // one node, or nodes of unequal shares: nothing to gain
      entry = find(Algorithm::kFlat);
      out.algorithm = Algorithm::kFlat;
    }
  }
  if (n > 1) out.steps = entry->plan(n, nodes, direction);
  out.direction = direction;
  if (entry->hierarchical) {
    out.node.assign(size_t(n), 0);
    for (size_t x = 0; x < nodes.size(); ++x)
      for (int m : nodes[x]) out.node[size_t(m)] = int(x);
  }
  return out;
}

std::shared_ptr<const A2ARouting> cached_a2a_routing(Algorithm algorithm,
                                                     const core::RankGroup& group,
                                                     int ranks_per_node, A2ADirection direction) {
  using Key = std::tuple<Algorithm, A2ADirection, int, core::RankGroup>;
  static std::mutex mutex;
  static std::map<Key, std::shared_ptr<const A2ARouting>> cache;
  Key key{algorithm, direction, ranks_per_node, group};
  {
    const std::lock_guard lock(mutex);
    if (auto it = cache.find(key); it != cache.end()) return it->second;
  }
  auto plan =
      std::make_shared<const A2ARouting>(a2a_routing(algorithm, group, ranks_per_node, direction));
  const std::lock_guard lock(mutex);
  return cache.emplace(std::move(key), std::move(plan)).first->second;
}

double transfer_bytes(const RoutedTransfer& transfer, const std::vector<double>& pair_bytes,
                      int members, const std::vector<double>& node_bytes) {
  double sum = 0;
  for (const auto& [src, dst] : transfer.blocks) sum += pair_bytes[size_t(src) * members + dst];
  if (!transfer.node_blocks.empty() && node_bytes.size() != size_t(members) * members)
    throw Error("a2a routing", "a dedup plan's node blocks need the A2A's node bytes (" +
                                   std::to_string(members) + " x " + std::to_string(members) +
                                   "), got " + std::to_string(node_bytes.size()) + " entries");
  for (const auto& [src, dst] : transfer.node_blocks)
    sum += node_bytes[size_t(src) * members + dst];
  return sum;
}

}  // namespace moecomm::sched
