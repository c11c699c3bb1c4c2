// Chunks of the token path (exchange_chunks.h): sizes cover every block exactly once, the
// send side round-trips, the expert side is a permutation of the full buffer's rows, and the
// default TokenExchange::pipeline equals dispatch -> experts -> combine.
#include "nn/exchange_chunks.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <thread>

#include "nn/local_exchange.h"
#include "support/expect_error.h"
#include "threaded_exchange.h"

namespace moecomm::nn {
namespace {

TEST(ExchangeChunks, ChunksCoverEveryRowOnceInOrder) {
  for (int rows : {0, 1, 5, 7, 64})
    for (int n : {1, 2, 3, 8}) {
      int next = 0;
      for (int i = 0; i < n; ++i) {
        EXPECT_EQ(chunk_first(rows, i, n), next);
        EXPECT_GE(chunk_rows(rows, i, n), rows / n);
        EXPECT_LE(chunk_rows(rows, i, n), rows / n + 1);
        next += chunk_rows(rows, i, n);
      }
      EXPECT_EQ(next, rows);
    }
  EXPECT_ERROR_HAS(chunk_rows(4, 3, 3), "chunk 3 of 3 does not exist");
  EXPECT_ERROR_HAS(chunk_rows(4, 0, 0), "chunk 0 of 0");
}

ExchangeLayout sample_layout() {
  // 3 ranks x 2 local experts; uneven counts, some zero.
  return ExchangeLayout{3, 2, {3, 0, 5, 1, 2, 7}, {4, 1, 0, 6, 2, 3}};
}

TEST(ExchangeChunks, SendChunksRoundTrip) {
  const ExchangeLayout layout = sample_layout();
  const Tensor send = Tensor::randn({layout.send_rows(), 3}, 7);
  for (int n : {1, 2, 4, 9}) {
    Tensor back(send.shape());
    for (int i = 0; i < n; ++i) {
      const Tensor c = take_send_chunk(send, layout, i, n);
      EXPECT_EQ(c.rows(), chunk_layout(layout, i, n).send_rows());
      put_send_chunk(back, c, layout, i, n);
    }
    EXPECT_EQ(max_abs_diff(back, send), 0.0f) << n << " chunks";
  }
}

TEST(ExchangeChunks, RecvChunkRowsPermuteTheDispatchedBuffer) {
  const ExchangeLayout layout = sample_layout();
  for (int n : {1, 2, 3, 7}) {
    std::vector<int> all;
    for (int i = 0; i < n; ++i) {
      const std::vector<int> rows = recv_chunk_rows(layout, i, n);
      EXPECT_EQ(static_cast<int>(rows.size()), chunk_layout(layout, i, n).recv_rows());
      all.insert(all.end(), rows.begin(), rows.end());
    }
    std::sort(all.begin(), all.end());
    std::vector<int> expect(static_cast<size_t>(layout.recv_rows()));
    std::iota(expect.begin(), expect.end(), 0);
    EXPECT_EQ(all, expect) << n << " chunks";
  }
  // Full buffer [l][src]: l0: src0 rows 0-3, src2 rows 4-5; l1: src0 row 6, src1 rows 7-12,
  // src2 rows 13-15. Chunk 0 of 2 takes floor(rows / 2) of each block's first rows.
  EXPECT_EQ(recv_chunk_rows(layout, 0, 2), (std::vector<int>{0, 1, 4, 7, 8, 9, 13}));
}

TEST(ExchangeChunks, GatherAndScatterRowsCheckIndices) {
  const Tensor m = Tensor::randn({4, 2}, 1);
  const Tensor g = gather_rows(m, {3, 0});
  EXPECT_EQ(g.at(0, 1), m.at(3, 1));
  Tensor back({4, 2});
  scatter_rows(back, g, {3, 0});
  EXPECT_EQ(back.at(3, 0), m.at(3, 0));
  EXPECT_ERROR_HAS(gather_rows(m, {4}), "row 4 of 4 does not exist");
  EXPECT_ERROR_HAS(scatter_rows(back, g, {1}), "2 rows for 1 indices");
}

// Row-wise "experts" (y = 2x + 1): the pipelined result must equal the one-shot one.
TEST(ExchangeChunks, DefaultPipelineEqualsDispatchExpertsCombine) {
  constexpr int kRanks = 3;
  testing::ExchangeBoard board(kRanks);
  std::vector<Tensor> direct(kRanks), piped(kRanks);
  auto expert = [](const Tensor& rows) {
    Tensor y = rows;
    for (int64_t k = 0; k < y.size(); ++k) y[k] = 2.0f * y[k] + 1.0f;
    return y;
  };
  std::vector<std::thread> threads;
  for (int r = 0; r < kRanks; ++r)
    threads.emplace_back([&, r] {
      testing::ThreadedExchange ex(board, r);
      std::vector<int> counts(6);
      for (int e = 0; e < 6; ++e) counts[static_cast<size_t>(e)] = (r * 5 + e * 3) % 7;
      const ExchangeLayout layout = ex.exchange_counts(counts);
      const Tensor send = Tensor::randn({layout.send_rows(), 4}, 10 + static_cast<uint64_t>(r));
      direct[static_cast<size_t>(r)] = ex.combine(expert(ex.dispatch(send, layout)), layout);
      piped[static_cast<size_t>(r)] =
          ex.pipeline(send, layout, 3,
                      [&](int, const ExchangeLayout&, const Tensor& rows) { return expert(rows); });
    });
  for (std::thread& t : threads) t.join();
  for (int r = 0; r < kRanks; ++r)
    EXPECT_EQ(max_abs_diff(direct[static_cast<size_t>(r)], piped[static_cast<size_t>(r)]), 0.0f);
}

}  // namespace
}  // namespace moecomm::nn
