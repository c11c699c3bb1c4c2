#include "rt/dedup_a2a.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>

#include "core/error.h"
#include "mpi_test_util.h"
#include "nn/bf16.h"
#include "rt/comm_pool.h"

namespace moecomm::rt {
namespace {

using test::world_rank;
using test::world_size;

constexpr int64_t kCols = 3;
constexpr int kTokens = 6;

// Member s's rows for member d: a deterministic set of its tokens, some twice (a token with
// two experts on d), so every member can compute what every other sends.
std::vector<int32_t> tokens_for(int s, int d, int salt) {
  std::vector<int32_t> out;
  for (int t = 0; t < kTokens; ++t) {
    const int h = (s * 7 + d * 5 + t * 3 + salt) % 5;
    if (h == 0 || h == 3) out.push_back(t);
    if (h == 3) out.push_back(t);  // a second expert of d
  }
  return out;
}

float value(int s, int32_t token, int64_t c) {
  return float(s * 100 + token * 10) + float(c) * 0.25f;
}

KeyedRows sent_by(int me, int n, int salt, bool scalars) {
  KeyedRows k;
  k.cols = kCols;
  for (int d = 0; d < n; ++d) {
    const std::vector<int32_t> tokens = tokens_for(me, d, salt);
    k.counts.push_back(int64_t(tokens.size()));
    k.headers.push_back({me, d, int32_t(tokens.size())});
    for (size_t r = 0; r < tokens.size(); ++r) {
      k.keys.push_back(tokens[r]);
      for (int64_t c = 0; c < kCols; ++c) k.rows.push_back(value(me, tokens[r], c));
      if (scalars) k.scalars.push_back(float(me * 1000 + d * 10) + float(r));
    }
  }
  return k;
}

// Brute force: the distinct tokens of (s, d) pairs sent off-node and on-node (one per node
// for the crossing, one per member inside the node), as the dispatch's first step moves them.
int64_t distinct_tokens(int s, const std::vector<int>& members, int salt) {
  std::set<int32_t> tokens;
  for (int d : members)
    for (int32_t t : tokens_for(s, d, salt)) tokens.insert(t);
  return int64_t(tokens.size());
}

void check_group(const core::RankGroup& group, int rpn, int salt) {
  const CommPool pool(MPI_COMM_WORLD, {{group, 0}});
  if (!pool.has({group, 0})) return;
  const Comm& comm = pool.at({group, 0});
  const int n = comm.size(), me = comm.rank();
  const std::string where = "ranks per node " + std::to_string(rpn);
  const CallOptions o{.label = "dedup test", .timeout_s = test::kTimeout, .ranks_per_node = rpn};
  const auto dispatch =
      sched::a2a_routing(sched::Algorithm::kDedup, group, rpn, sched::A2ADirection::kDispatch);
  const auto combine =
      sched::a2a_routing(sched::Algorithm::kDedup, group, rpn, sched::A2ADirection::kCombine);

  // Dispatch: exactly the plain A2A-v's rows, tokens, scalars and headers.
  const KeyedRows send = sent_by(me, n, salt, true);
  const KeyedRows got = dedup_broadcast(comm, send, dispatch, o);
  KeyedRows want;
  for (int s = 0; s < n; ++s) {
    const KeyedRows theirs = sent_by(s, n, salt, true);
    int64_t at = 0;
    for (int d = 0; d < me; ++d) at += theirs.counts[size_t(d)];
    const int64_t count = theirs.counts[size_t(me)];
    want.counts.push_back(count);
    want.headers.push_back(theirs.headers[size_t(me)]);
    want.keys.insert(want.keys.end(), theirs.keys.begin() + at, theirs.keys.begin() + at + count);
    want.scalars.insert(want.scalars.end(), theirs.scalars.begin() + at,
                        theirs.scalars.begin() + at + count);
    want.rows.insert(want.rows.end(), theirs.rows.begin() + at * kCols,
                     theirs.rows.begin() + (at + count) * kCols);
  }
  EXPECT_EQ(got.counts, want.counts) << where;
  EXPECT_EQ(got.headers, want.headers) << where;
  EXPECT_EQ(got.keys, want.keys) << where;
  EXPECT_EQ(got.scalars, want.scalars) << where;
  EXPECT_EQ(got.rows, want.rows) << where;

  // bf16 rows: each rounded once on the wire, the same rows sent.
  KeyedRows half = send;
  half.bf16 = true;
  const KeyedRows got16 = dedup_broadcast(comm, half, dispatch, o);
  std::vector<float> want16 = want.rows;
  for (float& x : want16) x = nn::from_bf16(nn::to_bf16(x));
  EXPECT_EQ(got16.rows, want16) << where;
  EXPECT_EQ(got16.sent.rows, got.sent.rows) << where;

  // Rows sent: with nodes, one per token and node across, one per token and member inside
  // (step 1), plus the counterpart's fan-out of the crossed tokens (step 2).
  if (!dispatch.node.empty()) {
    const auto nodes = sched::members_by_node(group, rpn);
    const int mine = dispatch.node[size_t(me)];
    const int local = int(std::find(nodes[size_t(mine)].begin(), nodes[size_t(mine)].end(), me) -
                          nodes[size_t(mine)].begin());
    std::vector<int64_t> rows(size_t(n), 0);
    for (size_t y = 0; y < nodes.size(); ++y) {
      if (int(y) == mine) {  // on-node: once per token and member
        for (int b : nodes[y])
          if (b != me) rows[size_t(b)] += distinct_tokens(me, {b}, salt);
        continue;
      }
      // Across: once per token and node, to my counterpart there; and, as the counterpart of
      // that node's member of my local index, its tokens fanned out to my node's members.
      rows[size_t(nodes[y][size_t(local)])] += distinct_tokens(me, nodes[y], salt);
      const int a = nodes[y][size_t(local)];
      for (int b : nodes[size_t(mine)])
        if (b != me) rows[size_t(b)] += distinct_tokens(a, {b}, salt);
    }
    EXPECT_EQ(got.sent.rows, rows) << where;
  }

  // Combine: member b returns, for each source a, rows keyed by a's tokens; a gets their sums
  // per token and every scalar back in its send order.
  KeyedRows back;
  back.cols = kCols;
  for (int a = 0; a < n; ++a) {
    const std::vector<int32_t> tokens = tokens_for(a, me, salt);  // a sent me these
    back.counts.push_back(int64_t(tokens.size()));
    for (size_t r = 0; r < tokens.size(); ++r) {
      back.keys.push_back(tokens[r]);
      for (int64_t c = 0; c < kCols; ++c) back.rows.push_back(value(me, tokens[r], c) + float(r));
      back.scalars.push_back(float(me * 1000 + a * 10) + float(r));
    }
  }
  const int64_t tokens = kTokens - 1;  // the last token stands for padding: dropped
  const ReducedRows reduced = dedup_reduce(comm, back, tokens, combine, o);
  std::vector<float> sums(size_t(tokens * kCols), 0.0f);
  std::vector<float> scalars;
  std::vector<int64_t> counts;
  for (int b = 0; b < n; ++b) {
    const std::vector<int32_t> mine = tokens_for(me, b, salt);
    counts.push_back(int64_t(mine.size()));
    for (size_t r = 0; r < mine.size(); ++r) {
      scalars.push_back(float(b * 1000 + me * 10) + float(r));
      if (mine[r] >= tokens) continue;
      for (int64_t c = 0; c < kCols; ++c)
        sums[size_t(mine[r] * kCols + c)] += value(b, mine[r], c) + float(r);
    }
  }
  EXPECT_EQ(reduced.counts, counts) << where;
  EXPECT_EQ(reduced.scalars, scalars) << where;
  ASSERT_EQ(reduced.sums.size(), sums.size()) << where;
  for (size_t i = 0; i < sums.size(); ++i)  // small integers and quarters: exact in any order
    EXPECT_EQ(reduced.sums[i], sums[i]) << where << " value " << i;
}

TEST(DedupA2A, EqualsThePlainA2AAndItsSumsPerToken) {
  for (int rpn : {1, 2, world_size()})
    for (int salt : {0, 1, 2}) check_group(test::all_ranks(), rpn, salt);
}

TEST(DedupA2A, RefusesThePlanOfTheOtherDirection) {
  const CommPool pool(MPI_COMM_WORLD, {{test::all_ranks(), 0}});
  const Comm& comm = pool.at({test::all_ranks(), 0});
  const CallOptions o{.label = "moe.dispatch.a2a", .timeout_s = test::kTimeout};
  const auto combine = sched::a2a_routing(sched::Algorithm::kDedup, test::all_ranks(), 2,
                                          sched::A2ADirection::kCombine);
  const KeyedRows send = sent_by(world_rank(), world_size(), 0, false);
  EXPECT_THROW(dedup_broadcast(comm, send, combine, o), Error);
  KeyedRows bad = send;
  bad.keys.pop_back();
  const auto dispatch = sched::a2a_routing(sched::Algorithm::kDedup, test::all_ranks(), 2);
  EXPECT_THROW(dedup_broadcast(comm, bad, dispatch, o), Error);
}

}  // namespace
}  // namespace moecomm::rt
