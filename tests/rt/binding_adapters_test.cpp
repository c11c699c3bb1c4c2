// The small adapters ModelBinding's token path puts around its A2As, on one rank: HybridEP's
// exchange-rank <-> A2A-member remap (rt/hybrid_remap.h) and the bf16 rows on the wire
// (rt/bf16_wire.h).
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "rt/bf16_wire.h"
#include "rt/hybrid_remap.h"

namespace moecomm::rt {
namespace {

std::vector<std::byte> bytes(const std::vector<int>& v) {
  std::vector<std::byte> out;
  for (int x : v) out.push_back(std::byte(x));
  return out;
}

// 8 members, domains {0, 4}, {1, 5}, {2, 6}, {3, 7}: member 5 exchanges with 4, 5, 6, 7.
TEST(HybridRemap, MovesExchangeBlocksToTheirA2aMembersAndBack) {
  const HybridRemap remap(8, 2, {0, 4, 1, 5, 2, 6, 3, 7}, 5);
  EXPECT_EQ(remap.member(0), 4);
  EXPECT_EQ(remap.member(3), 7);
  OpBuffer buf{bytes({1, 2, 2, 3, 3, 3}), {1, 2, 3, 0}, {5, 6, 7, 8}};
  remap.to_members(buf);
  EXPECT_EQ(buf.data, bytes({1, 2, 2, 3, 3, 3}));
  EXPECT_EQ(buf.counts, (std::vector<int64_t>{0, 0, 0, 0, 1, 2, 3, 0}));
  EXPECT_EQ(buf.recv_counts, (std::vector<int64_t>{0, 0, 0, 0, 5, 6, 7, 8}));
  // What arrived from members 4..7 (nothing from the others), back by exchange rank.
  OpBuffer got{bytes({9, 8, 8}), {0, 0, 0, 0, 0, 1, 0, 2}, {}};
  remap.from_members(got);
  EXPECT_EQ(got.data, bytes({9, 8, 8}));
  EXPECT_EQ(got.counts, (std::vector<int64_t>{0, 1, 0, 2}));
}

TEST(HybridRemap, PlainEpLeavesTheBufferAlone) {
  const HybridRemap remap;
  EXPECT_TRUE(remap.identity());
  OpBuffer buf{bytes({1, 2}), {1, 1}, {}};
  EXPECT_EQ(remap.to_members(buf), &buf);
  EXPECT_EQ(buf.counts, (std::vector<int64_t>{1, 1}));
}

// Two blocks of a 4-byte header and fp32 rows that bf16 holds exactly: the header stays, the
// rows take half the bytes and come back equal.
TEST(Bf16Wire, HeadersStayAndRowsTravelAtHalfTheBytes) {
  const std::vector<float> rows = {1.5f, -2.0f, 0.25f};
  const int32_t header[2] = {7, 9};
  OpBuffer buf;
  for (int b = 0; b < 2; ++b) {
    const size_t at = buf.data.size();
    buf.data.resize(at + 4 + (b == 0 ? 12 : 0));
    std::memcpy(buf.data.data() + at, &header[b], 4);
    if (b == 0) std::memcpy(buf.data.data() + at + 4, rows.data(), 12);
    buf.counts.push_back(int64_t(buf.data.size() - at));
  }
  buf.recv_counts = {4 + 8, 4};
  OpBuffer sent = buf;
  rows_to_bf16(sent, 4);
  EXPECT_EQ(sent.counts, (std::vector<int64_t>{4 + 6, 4}));
  EXPECT_EQ(sent.recv_counts, (std::vector<int64_t>{4 + 4, 4}));
  rows_from_bf16(sent, 4);
  EXPECT_EQ(sent.data, buf.data);
  EXPECT_EQ(sent.counts, buf.counts);
}

}  // namespace
}  // namespace moecomm::rt
