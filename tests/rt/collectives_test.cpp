#include <gtest/gtest.h>

#include "core/error.h"
#include "mpi_test_util.h"
#include "rt/collectives.h"
#include "rt/comm_pool.h"
#include "world_comm_test.h"

namespace moecomm::rt {
namespace {

using sched::Algorithm;
using test::world_rank;
using test::world_size;

using Collectives = test::WorldCommTest;

TEST_F(Collectives, AllToAllVFloat) {
  const test::SendBlocks s = test::send_blocks(world().group(), world_rank());
  const Received<float> r =
      all_to_all_v<float>(world(), s.data, s.counts, Algorithm::kFlat, options("a2a"));
  EXPECT_EQ(r.data, test::expected_blocks(world().group(), world_rank()));
  for (int src = 0; src < world_size(); ++src) {
    EXPECT_EQ(r.counts[src], test::pair_count(src, world_rank()));
  }
}

// With the receive counts given (the token paths know them), no counts exchange: the same
// delivery, flat or routed; counts of the wrong length are refused before communicating.
TEST_F(Collectives, AllToAllVWithKnownReceiveCounts) {
  const test::SendBlocks s = test::send_blocks(world().group(), world_rank());
  std::vector<int64_t> recv;
  for (int src = 0; src < world_size(); ++src) recv.push_back(test::pair_count(src, world_rank()));
  for (Algorithm a : {Algorithm::kFlat, Algorithm::k2DH}) {
    const Received<float> r = all_to_all_v<float>(world(), s.data, s.counts, a, options(), recv);
    EXPECT_EQ(r.data, test::expected_blocks(world().group(), world_rank()));
    EXPECT_EQ(r.counts, recv);
  }
  std::vector<int64_t> short_list = recv;
  short_list.pop_back();
  EXPECT_THROW(
      all_to_all_v<float>(world(), s.data, s.counts, Algorithm::kFlat, options(), short_list),
      Error);
}

// A one-member A2A-v (HybridEP's token group when one domain holds every expert) hands the
// member its own block whatever the algorithm, counts it as same-device bytes, and still
// checks given receive counts.
TEST(CollectivesAlone, OneMemberAllToAllVReturnsItsOwnBlock) {
  MPI_Comm self = MPI_COMM_NULL;
  check_mpi(MPI_Comm_dup(MPI_COMM_SELF, &self), "MPI_Comm_dup");
  const Comm alone(self, {world_rank()}, "alone");
  const std::vector<float> send{1.5f, -2.0f, 3.25f};
  const std::vector<int64_t> counts{3};
  for (Algorithm a : {Algorithm::kFlat, Algorithm::k1DH, Algorithm::k2DH}) {
    LinkBytes bytes;
    CallOptions o{.label = "alone a2a", .timeout_s = test::kTimeout, .ranks_per_node = 2};
    o.bytes = &bytes;
    const Received<float> r = all_to_all_v<float>(alone, send, counts, a, o);
    EXPECT_EQ(r.data, send);
    EXPECT_EQ(r.counts, counts);
    EXPECT_EQ(bytes[LinkLevel::kSameDevice], 12);
    EXPECT_EQ(bytes.total(), 12);
    EXPECT_EQ(all_to_all_v<float>(alone, send, counts, a, o, counts).data, send);
    const std::vector<int64_t> wrong{2};
    try {
      all_to_all_v<float>(alone, send, counts, a, o, wrong);
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("alone a2a"), std::string::npos) << e.what();
    }
  }
}

// The routed A2A gathers every count anyway: given receive counts that differ are an Error
// (the flat one trusts them; MPI itself aborts on a truncation).
TEST_F(Collectives, RoutedAllToAllVChecksGivenReceiveCounts) {
  const test::SendBlocks s = test::send_blocks(world().group(), world_rank());
  std::vector<int64_t> recv;
  for (int src = 0; src < world_size(); ++src) recv.push_back(test::pair_count(src, world_rank()));
  const auto from = std::find_if(recv.begin(), recv.end(), [](int64_t c) { return c > 0; });
  ASSERT_NE(from, recv.end());
  --*from;  // one value short from the first member that sends this one any
  for (Algorithm a : {Algorithm::k1DH, Algorithm::k2DH}) {
    try {
      all_to_all_v<float>(world(), s.data, s.counts, a, options("short"), recv);
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("short"), std::string::npos) << e.what();
    }
  }
}

TEST_F(Collectives, AllToAllVBytes) {
  const int n = world_size(), me = world_rank();
  std::vector<std::byte> send;
  std::vector<int64_t> counts;
  for (int dst = 0; dst < n; ++dst) {
    counts.push_back(3 * ((me + dst) % 3));
    for (int64_t i = 0; i < counts.back(); ++i) send.push_back(std::byte(me * 16 + dst + i));
  }
  const Received<std::byte> r = all_to_all_v(world(), std::span<const std::byte>(send), counts,
                                             Algorithm::kFlat, options("a2a bytes"));
  std::vector<std::byte> expected;
  for (int src = 0; src < n; ++src) {
    for (int64_t i = 0; i < 3 * ((src + me) % 3); ++i) {
      expected.push_back(std::byte(src * 16 + me + i));
    }
  }
  EXPECT_EQ(r.data, expected);
}

TEST_F(Collectives, AllToAllVCountsBytesByLevel) {
  const int me = world_rank();
  const test::SendBlocks s = test::send_blocks(world().group(), me, 1);
  LinkBytes counted, expected;
  CallOptions o = options("a2a levels");
  o.bytes = &counted;
  all_to_all_v<float>(world(), s.data, s.counts, Algorithm::kFlat, o);
  const std::vector<double> pairs = test::pair_bytes(world().group(), 1);
  for (int dst = 0; dst < world_size(); ++dst) {
    expected.add(me, dst, static_cast<int64_t>(pairs[size_t(me) * world_size() + dst]), 2);
  }
  EXPECT_EQ(counted, expected);
  EXPECT_GT(counted[LinkLevel::kInterNode], 0);
}

TEST_F(Collectives, AllGather) {
  const std::vector<float> mine = {1.0f * world_rank(), 2.0f, 3.0f * world_rank()};
  const std::vector<float> all = all_gather<float>(world(), mine, options("ag"));
  ASSERT_EQ(all.size(), 3u * world_size());
  for (int r = 0; r < world_size(); ++r) {
    EXPECT_EQ(all[3 * r], 1.0f * r);
    EXPECT_EQ(all[3 * r + 1], 2.0f);
    EXPECT_EQ(all[3 * r + 2], 3.0f * r);
  }
}

TEST_F(Collectives, ReduceScatterSum) {
  const int n = world_size(), me = world_rank();
  std::vector<float> in;
  for (int b = 0; b < n; ++b) {
    for (int i = 0; i < 5; ++i) in.push_back(static_cast<float>(me + 10 * b + i));
  }
  const std::vector<float> out = reduce_scatter_sum(world(), in, options("rs"));
  ASSERT_EQ(out.size(), 5u);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(out[i], n * (n - 1) / 2.0f + n * (10.0f * me + i));
}

// The ring (hybrid experts' gradient return) gives MPI's sums, and each member sends n - 1
// blocks to its successor only.
TEST_F(Collectives, RingReduceScatterSumsLikeMpiAndSendsToTheNext) {
  const int n = world_size(), me = world_rank();
  std::vector<float> in;
  for (int b = 0; b < n; ++b)
    for (int i = 0; i < 5; ++i) in.push_back(static_cast<float>(me + 10 * b + i));
  CallOptions o = options("ring rs");
  LinkBytes bytes;
  o.bytes = &bytes;
  EXPECT_EQ(ring_reduce_scatter_sum(world(), in, o),
            reduce_scatter_sum(world(), in, options("rs")));
  LinkBytes want;
  if (n > 1) want.add(me, (me + 1) % n, 20 * (n - 1), 2);
  EXPECT_EQ(bytes, want);
  EXPECT_THROW(ring_reduce_scatter_sum(world(), std::vector<float>(n + 1, 1.0f), o), Error);
}

TEST_F(Collectives, RingAllGatherDeliversLikeMpiAndSendsToTheNext) {
  const int n = world_size(), me = world_rank();
  std::vector<std::byte> mine;
  for (int i = 0; i < 6; ++i) mine.push_back(static_cast<std::byte>(10 * me + i));
  std::vector<std::byte> ring(6 * n), mpi(6 * n);
  CallOptions o = options("ring ag");
  LinkBytes bytes;
  o.bytes = &bytes;
  ring_all_gather(world(), mine, ring, o);
  all_gather(world(), mine, mpi, options("ag"));
  EXPECT_EQ(ring, mpi);
  LinkBytes want;
  if (n > 1) want.add(me, (me + 1) % n, 6 * (n - 1), 2);
  EXPECT_EQ(bytes, want);
  std::vector<std::byte> small(6 * n - 1);
  EXPECT_THROW(ring_all_gather(world(), mine, small, o), Error);
}

// Large AllReduces run as a ring; both paths give the exact sums (integers) on every member,
// and count the same bytes.
TEST_F(Collectives, RingAllReduceSumsLikeMpiWhateverTheLengthAndCountsTheSameBytes) {
  const int n = world_size(), me = world_rank();
  for (const size_t length : {size_t{1}, size_t{7}, size_t{kRingAllReduceBytes / 4 + 3}}) {
    std::vector<float> ring(length), mpi(length);
    for (size_t i = 0; i < length; ++i) ring[i] = mpi[i] = static_cast<float>(me * (i % 97 + 1));
    CallOptions o = options("ring ar"), m = options("ar");
    LinkBytes ring_bytes, mpi_bytes;
    o.bytes = &ring_bytes;
    m.bytes = &mpi_bytes;
    ring_all_reduce_sum(world(), ring, o);
    all_reduce_sum(world(), mpi, m);  // the ring itself from kRingAllReduceBytes on
    for (size_t i = 0; i < length; ++i)
      ASSERT_EQ(ring[i], static_cast<float>((i % 97 + 1) * n * (n - 1) / 2)) << "float " << i;
    EXPECT_EQ(ring, mpi) << length << " floats";
    EXPECT_EQ(ring_bytes, mpi_bytes) << length << " floats";
  }
}

TEST_F(Collectives, AllReduceSum) {
  const int n = world_size();
  std::vector<float> data(7);
  for (int i = 0; i < 7; ++i) data[i] = static_cast<float>(world_rank() * (i + 1));
  all_reduce_sum(world(), data, options("ar"));
  for (int i = 0; i < 7; ++i) EXPECT_EQ(data[i], (i + 1) * n * (n - 1) / 2.0f);
}

// Logical bytes of the block collectives (collectives.h): block j to member j, own block to
// every other member; nothing to itself.
LinkBytes to_others(const std::vector<int64_t>& bytes_to) {
  LinkBytes b;
  for (int j = 0; j < world_size(); ++j)
    if (j != world_rank()) b.add(world_rank(), j, bytes_to[size_t(j)], 2);
  return b;
}

TEST_F(Collectives, AllGatherVDeliversMemberMajorBlocksAndCountsBytes) {
  const int n = world_size(), me = world_rank();
  std::vector<int64_t> counts;
  for (int i = 0; i < n; ++i) counts.push_back((i * 3) % 4);  // members 0 and 4 give nothing
  std::vector<float> mine;
  for (int64_t k = 0; k < counts[size_t(me)]; ++k) mine.push_back(100.0f * me + k);
  LinkBytes counted;
  CallOptions o = options("agv");
  o.bytes = &counted;
  const std::vector<float> all = all_gather_v<float>(world(), mine, counts, o);
  std::vector<float> expected;
  for (int i = 0; i < n; ++i)
    for (int64_t k = 0; k < counts[size_t(i)]; ++k) expected.push_back(100.0f * i + k);
  EXPECT_EQ(all, expected);
  EXPECT_EQ(counted, to_others(std::vector<int64_t>(n, 4 * counts[size_t(me)])));
  if (counts[size_t(me)] > 0) {
    EXPECT_GT(counted[LinkLevel::kInterNode], 0);
  }
}

TEST_F(Collectives, ReduceScatterVSumsBlocksOfGivenSizesAndCountsBytes) {
  const int n = world_size(), me = world_rank();
  std::vector<int64_t> counts;
  for (int j = 0; j < n; ++j) counts.push_back(j % 3);  // member 0 gets nothing
  std::vector<float> in;
  for (int j = 0; j < n; ++j)
    for (int64_t k = 0; k < counts[size_t(j)]; ++k)
      in.push_back(static_cast<float>(me + 10 * j + k));
  LinkBytes counted;
  CallOptions o = options("rsv");
  o.bytes = &counted;
  const std::vector<float> out = reduce_scatter_v(world(), in, counts, o);
  ASSERT_EQ(out.size(), static_cast<size_t>(counts[size_t(me)]));
  for (size_t k = 0; k < out.size(); ++k)
    EXPECT_EQ(out[k], n * (n - 1) / 2.0f + n * (10.0f * me + static_cast<float>(k)));
  std::vector<int64_t> bytes;
  for (int64_t c : counts) bytes.push_back(4 * c);
  EXPECT_EQ(counted, to_others(bytes));
}

TEST_F(Collectives, BlockCollectivesCountBytesByLevel) {
  const int n = world_size(), me = world_rank();
  LinkBytes ag, rs, ar;
  CallOptions o = options("bytes");
  o.bytes = &ag;
  all_gather<float>(world(), std::vector<float>(3, 1.0f), o);
  EXPECT_EQ(ag, to_others(std::vector<int64_t>(n, 12)));
  o.bytes = &rs;
  reduce_scatter_sum(world(), std::vector<float>(5 * n, 1.0f), o);
  EXPECT_EQ(rs, to_others(std::vector<int64_t>(n, 20)));
  // AllReduce of 7 floats = ReduceScatter + AllGather of the blocks [7 j / n, 7 (j + 1) / n).
  o.bytes = &ar;
  std::vector<float> data(7, 1.0f);
  all_reduce_sum(world(), data, o);
  const auto block = [n](int j) { return int64_t{7} * (j + 1) / n - int64_t{7} * j / n; };
  std::vector<int64_t> bytes;
  for (int j = 0; j < n; ++j) bytes.push_back(4 * (block(j) + block(me)));
  EXPECT_EQ(ar, to_others(bytes));
  EXPECT_EQ(ar.total(), 4 * (7 - block(me)) + 4 * (n - 1) * block(me));
}

TEST_F(Collectives, BroadcastFromEveryRoot) {
  for (int root = 0; root < world_size(); ++root) {
    std::vector<float> data(4, -1.0f);
    if (world_rank() == root) data = {1.0f * root, 2, 3, 4};
    broadcast<float>(world(), data, root, options("bcast"));
    EXPECT_EQ(data, (std::vector<float>{1.0f * root, 2, 3, 4}));
  }
}

TEST_F(Collectives, BadArgumentsThrowBeforeCommunicating) {
  std::vector<float> data(3);
  const std::vector<int64_t> short_counts(world_size() - 1, 0);
  EXPECT_THROW(all_to_all_v<float>(world(), data, short_counts, Algorithm::kFlat, options("x")),
               Error);
  const std::vector<int64_t> wrong_sum(world_size(), 1);
  EXPECT_THROW(all_to_all_v<float>(world(), data, wrong_sum, Algorithm::k2DH, options("x")), Error);
  std::vector<float> odd(world_size() + 1);
  EXPECT_THROW(reduce_scatter_sum(world(), odd, options("x")), Error);
  EXPECT_THROW(broadcast<float>(world(), data, world_size(), options("x")), Error);
  const std::vector<int64_t> ones(world_size(), 1);
  EXPECT_THROW(all_gather_v<float>(world(), data, ones, options("x")), Error);  // 3 != 1
  EXPECT_THROW(all_gather_v<float>(world(), data, short_counts, options("x")), Error);
  EXPECT_THROW(reduce_scatter_v(world(), data, ones, options("x")), Error);  // 3 != n
  EXPECT_THROW(reduce_scatter_v(world(), data, short_counts, options("x")), Error);
}

}  // namespace
}  // namespace moecomm::rt
