// TokenExchange helpers: the A2A-v receive permutation and LocalExchange.
#include <gtest/gtest.h>

#include "nn/exchange_permute.h"
#include "nn/local_exchange.h"
#include "support/expect_error.h"

namespace moecomm::nn {
namespace {

TEST(ExchangePermute, SourceMajorToLocalExpertMajorAndBack) {
  // EP = 2, L = 2; recv counts (src, l): (0,0)=2, (0,1)=1, (1,0)=1, (1,1)=1.
  ExchangeLayout layout{2, 2, {0, 0, 0, 0}, {2, 1, 1, 1}};
  Tensor rows({5, 1}, {0, 1, 2, 3, 4});  // source-major: (0,0)(0,0)(0,1)(1,0)(1,1)
  const Tensor em = source_to_expert_major(rows, layout);
  EXPECT_EQ(em.values(), (std::vector<float>{0, 1, 3, 2, 4}));
  EXPECT_EQ(layout.local_rows(0), 3);
  EXPECT_EQ(layout.local_offset(1), 3);
  EXPECT_EQ(expert_to_source_major(em, layout).values(), rows.values());
  EXPECT_ERROR_HAS(source_to_expert_major(Tensor({4, 1}), layout), "exchange permute");
}

TEST(LocalExchange, IsTheIdentity) {
  LocalExchange ex;
  const ExchangeLayout layout = ex.exchange_counts({2, 0, 1});
  EXPECT_EQ(layout.local_experts, 3);
  EXPECT_EQ(layout.recv_counts, (std::vector<int>{2, 0, 1}));
  const Tensor t = Tensor::randn({3, 4}, 1);
  EXPECT_EQ(ex.dispatch(t, layout).values(), t.values());
  EXPECT_EQ(ex.combine(t, layout).values(), t.values());
  EXPECT_ERROR_HAS(ex.dispatch(Tensor({2, 4}), layout), "local dispatch");
}

}  // namespace
}  // namespace moecomm::nn
