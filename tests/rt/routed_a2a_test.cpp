#include <gtest/gtest.h>

#include "mpi_test_util.h"
#include "rt/comm_pool.h"
#include "rt/routed_a2a.h"
#include "sched/a2a_routing.h"
#include "sim/collective_flows.h"

namespace moecomm::rt {
namespace {

using sched::Algorithm;
using test::world_rank;
using test::world_size;

// The simulator's flows for the same collective, as the bytes this rank sends by level.
LinkBytes simulated_bytes(const core::RankGroup& group, Algorithm algorithm, int rpn, int salt) {
  sched::Collective c;
  c.kind = sched::OpKind::kAllToAll;
  c.algorithm = algorithm;
  c.group = group;
  c.pair_bytes = test::pair_bytes(group, salt);
  const int me = world_rank();
  const auto member = std::find(group.begin(), group.end(), me) - group.begin();
  LinkBytes out;
  out.add(me, me, static_cast<int64_t>(c.pair(int(member), int(member))), rpn);
  for (const sim::FlowPhase& phase : sim::collective_phases(c, rpn)) {
    for (const sim::FlowSpec& f : phase) {
      if (f.src == me) out.add(f.src, f.dst, static_cast<int64_t>(f.bytes), rpn);
    }
  }
  return out;
}

// Every A2A algorithm of the table delivers what flat delivers and moves what the simulator's
// flows move: a new algorithm is tested here by its table entry alone.
void check_group(const core::RankGroup& group) {
  const CommPool pool(MPI_COMM_WORLD, {{group, 0}});
  if (!pool.has({group, 0})) return;
  const Comm& comm = pool.at({group, 0});
  const int me = world_rank();
  for (int rpn : {1, 2, 3, 4, world_size()}) {
    for (const sched::A2AAlgorithmInfo& info : sched::a2a_algorithms()) {
      if (!info.moves_blocks) continue;  // dedup: refused by the executors (executor_caps)
      const Algorithm algorithm = info.algorithm;
      const int salt = rpn + static_cast<int>(algorithm);
      const test::SendBlocks s = test::send_blocks(group, me, salt);
      LinkBytes counted;
      const CallOptions o{.label = "a2a " + std::string(sched::to_string(algorithm)),
                          .timeout_s = test::kTimeout,
                          .ranks_per_node = rpn,
                          .bytes = &counted};
      const Received<float> r = all_to_all_v<float>(comm, s.data, s.counts, algorithm, o);
      const std::string where =
          o.label + " group " + group_text(group) + " ranks per node " + std::to_string(rpn);
      EXPECT_EQ(r.data, test::expected_blocks(group, me, salt)) << where;
      for (size_t i = 0; i < group.size(); ++i) {
        EXPECT_EQ(r.counts[i], test::pair_count(group[i], me, salt)) << where;
      }
      EXPECT_EQ(counted, simulated_bytes(group, algorithm, rpn, salt)) << where;
    }
  }
}

TEST(RoutedA2A, EqualsFlatOnTheWorld) {
  check_group(test::all_ranks());
}

TEST(RoutedA2A, EqualsFlatOnSubgroups) {
  core::RankGroup evens, reversed = test::all_ranks();
  for (int r = 0; r < world_size(); r += 2) evens.push_back(r);
  std::reverse(reversed.begin(), reversed.end());
  check_group(evens);      // one member per node with 2 ranks per node
  check_group({0, 1, 2});  // uneven nodes: falls back to flat
  check_group(reversed);   // member order differs from rank order
}

}  // namespace
}  // namespace moecomm::rt
