// Order and I-Order: capacity dropping on a hand example, dropless counts, and gradients.
#include <gtest/gtest.h>

#include "grad_check.h"
#include "nn/capacity_order.h"
#include "nn/dropless_order.h"
#include "nn/iorder.h"
#include "support/expect_error.h"

namespace moecomm::nn {
namespace {

// T = 5, E = 2, k = 2; first choices e0 e0 e0 e1 e0, second choices e1 e1 e1 e0 e1.
GateOutput hand_routing() {
  GateOutput g;
  g.tokens = 5;
  g.experts = 2;
  g.per_group = 2;
  const int first[5] = {0, 0, 0, 1, 0};
  for (int t = 0; t < 5; ++t)
    for (int j = 0; j < 2; ++j) {
      g.token.push_back(t);
      g.expert.push_back(j == 0 ? first[t] : 1 - first[t]);
      g.weight.push_back(j == 0 ? 0.75f : 0.25f);
    }
  return g;
}

TEST(CapacityOrder, DropsPastCapacityInPriorityOrder) {
  // C = ceil(0.5 * 10 / 2) = 3. First choices fill first: e0 <- t0 t1 t2 (t4 dropped),
  // e1 <- t3; then second choices: e1 <- t0 t1 (t2, t4 dropped), e0 full (t3 dropped).
  const OrderPlan p = CapacityOrder(0.5f).plan(hand_routing());
  EXPECT_EQ(p.capacity, 3);
  EXPECT_EQ(p.counts, (std::vector<int>{3, 3}));
  EXPECT_EQ(p.offsets, (std::vector<int>{0, 3, 6}));
  EXPECT_EQ(p.row_token, (std::vector<int>{0, 1, 2, 3, 0, 1}));
  EXPECT_EQ(p.row_slot, (std::vector<int>{0, 2, 4, 6, 1, 3}));
  EXPECT_EQ(p.dropped_per_expert, (std::vector<int>{2, 2}));
  EXPECT_EQ(p.dropped, 4);
}

TEST(CapacityOrder, PadsWhenUnderCapacity) {
  const OrderPlan p = CapacityOrder(1.2f).plan(hand_routing());  // C = 6
  EXPECT_EQ(p.capacity, 6);
  EXPECT_EQ(p.rows(), 12);
  EXPECT_EQ(p.dropped, 0);
  EXPECT_EQ(p.row_token[5], -1);
  EXPECT_EQ(p.row_weight[5], 0.0f);
  EXPECT_EQ(p.row_token[11], -1);
  const Tensor x = Tensor::randn({5, 3}, 1);
  const Tensor buf = order_rows(p, x);
  EXPECT_EQ(buf.at(5, 0), 0.0f);
  EXPECT_EQ(buf.at(4, 2), x.at(3, 2));  // e0's fifth row: t3's second choice
  EXPECT_ERROR_HAS(CapacityOrder(0.0f), "capacity order", "positive");
}

TEST(DroplessOrder, KeepsEverySlot) {
  const OrderPlan p = DroplessOrder().plan(hand_routing());
  EXPECT_EQ(p.capacity, -1);
  EXPECT_EQ(p.counts, (std::vector<int>{5, 5}));
  EXPECT_EQ(p.dropped, 0);
  EXPECT_EQ(p.row_token, (std::vector<int>{0, 1, 2, 4, 3, 3, 0, 1, 2, 4}));
}

TEST(IOrder, WeightedSumBackToTokens) {
  const GateOutput g = hand_routing();
  const OrderPlan p = DroplessOrder().plan(g);
  const Tensor x = Tensor::randn({5, 3}, 2);
  const Tensor y = iorder(p, order_rows(p, x));  // weights sum to 1 per token
  EXPECT_LE(max_abs_diff(y, x), 1e-6f);
  const OrderPlan dropped = CapacityOrder(0.5f).plan(g);
  const Tensor yd = iorder(dropped, order_rows(dropped, x));
  for (int c = 0; c < 3; ++c) {
    EXPECT_FLOAT_EQ(yd.at(4, c), 0.0f);                // both of t4's slots dropped
    EXPECT_FLOAT_EQ(yd.at(3, c), 0.75f * x.at(3, c));  // t3 kept its first choice only
  }
}

TEST(OrderAndIOrder, GradientsMatchFiniteDifferences) {
  for (bool capacity : {true, false}) {
    GateOutput g = hand_routing();
    for (int s = 0; s < g.slots(); ++s)
      g.weight[static_cast<size_t>(s)] = 0.1f * static_cast<float>(s + 1);
    auto plan_of = [&] { return capacity ? CapacityOrder(0.5f).plan(g) : DroplessOrder().plan(g); };
    const OrderPlan p = plan_of();
    Tensor x = Tensor::randn({5, 3}, 3);
    const Tensor r = Tensor::randn({p.rows(), 3}, 4);
    const Tensor dx = order_rows_backward(p, r);
    testing::check_gradient("order dx", x, dx, [&] { return testing::dot(order_rows(p, x), r); });

    Tensor buf = Tensor::randn({p.rows(), 3}, 5);
    const Tensor dy = Tensor::randn({5, 3}, 6);
    const IOrderGrad gi = iorder_backward(p, buf, dy);
    testing::check_gradient("i-order dbuf", buf, gi.dbuf,
                            [&] { return testing::dot(iorder(p, buf), dy); });
    Tensor w({g.slots()}, g.weight);
    const Tensor gw({g.slots()}, gi.grad_weight);
    testing::check_gradient("i-order dweight", w, gw, [&] {
      g.weight = w.values();
      return testing::dot(iorder(plan_of(), buf), dy);
    });
  }
}

}  // namespace
}  // namespace moecomm::nn
