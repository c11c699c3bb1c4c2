#include "infer/replication_planner.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <set>

#include "infer/popularity_estimator.h"
#include "support/expect_error.h"

namespace moecomm::infer {
namespace {

using Devices = std::vector<std::vector<int>>;

ReplicationOptions on(int devices, int max_experts = 4) {
  return {devices, max_experts};
}

TEST(ReplicationPlanner, EvenPopularityGivesOneDevicePerExpert) {
  EXPECT_EQ(plan_replication({0.25, 0.25, 0.25, 0.25}, on(4, 1)).devices_of_expert,
            (Devices{{0}, {1}, {2}, {3}}));
}

// 4 devices x 2 slots: the 8 slots go by D'Hondt to .5 (x4) and .25 (x2), so every replica
// carries .125 and every device .25.
TEST(ReplicationPlanner, ReplicatesPopularAndPacksUnpopularExperts) {
  const auto plan = plan_replication({0.5, 0.25, 0.125, 0.125}, on(4, 2));
  EXPECT_EQ(plan.devices_of_expert, (Devices{{0, 1, 2, 3}, {0, 1}, {2}, {3}}));
  EXPECT_EQ(plan.experts_of_device(4), (Devices{{0, 1}, {0, 1}, {0, 2}, {0, 3}}));
  const std::vector<int64_t> counts{40, 20, 10, 10};
  EXPECT_EQ(device_loads(plan, counts, 4), (std::vector<double>{20, 20, 20, 20}));
  EXPECT_DOUBLE_EQ(ideal_load(counts, 4), 20);
  EXPECT_DOUBLE_EQ(plan.max_over_mean, 1.0);
  EXPECT_DOUBLE_EQ(plan.ep_max_over_mean, 2.0);  // plain EP: expert e on device e
}

// Experts without an estimate fill the slots left: with 2 devices x 4 slots, .6 and .4 take
// both devices (D caps them at 2), the first idle expert too, the other two one slot each.
TEST(ReplicationPlanner, UnestimatedExpertsFillTheSlotsLeft) {
  const auto plan = plan_replication({0.6, 0.4, 0, 0, 0}, on(2, 4));
  EXPECT_EQ(plan.devices_of_expert, (Devices{{0, 1}, {0, 1}, {0, 1}, {0}, {1}}));
  EXPECT_DOUBLE_EQ(plan.max_over_mean, 1.0);
  EXPECT_DOUBLE_EQ(plan.ep_max_over_mean, 2.0);  // plain EP: experts 0-2 on device 0
}

TEST(ReplicationPlanner, NoEstimateAtAllSpreadsExpertsOverEverySlot) {
  const auto plan = plan_replication({0, 0, 0, 0, 0}, on(2));
  EXPECT_EQ(plan.devices_of_expert, (Devices{{0, 1}, {0, 1}, {0, 1}, {0}, {1}}));
  EXPECT_DOUBLE_EQ(plan.max_over_mean, 1.0);
  EXPECT_DOUBLE_EQ(plan.ep_max_over_mean, 1.0);
}

TEST(ReplicationPlanner, ExpertParallelPlanAndMaxOverMean) {
  EXPECT_EQ(expert_parallel_plan(4, 2).devices_of_expert, (Devices{{0}, {0}, {1}, {1}}));
  EXPECT_EQ(expert_parallel_plan(5, 2).devices_of_expert, (Devices{{0}, {0}, {0}, {1}, {1}}));
  EXPECT_EQ(expert_parallel_plan(2, 4).devices_of_expert, (Devices{{0}, {2}}));
  EXPECT_DOUBLE_EQ(max_over_mean({3, 1, 2, 2}), 1.5);
  EXPECT_DOUBLE_EQ(max_over_mean({0, 0}), 1.0);
  EXPECT_EQ(expected_device_loads(expert_parallel_plan(4, 2), {0.5, 0.25, 0.125, 0.125}, 2),
            (std::vector<double>{0.75, 0.25}));
}

// Random popularity (some experts without estimate), devices and maxima.
TEST(ReplicationPlanner, PropertiesOnRandomInstances) {
  std::mt19937_64 rng(7);
  for (int round = 0; round < 300; ++round) {
    const int experts = 1 + static_cast<int>(rng() % 24);
    const int max_experts = 1 + static_cast<int>(rng() % 4);
    const int devices = (experts + max_experts - 1) / max_experts + static_cast<int>(rng() % 12);
    std::vector<double> pop(experts);
    double sum = 0;
    for (double& p : pop) sum += p = (rng() % 3 == 0) ? 0.0 : std::pow(0.5 + rng() % 100, 2);
    const double mass = 0.5 + 0.5 * static_cast<double>(rng() % 2);  // top-k cut or not
    for (double& p : pop) p = sum > 0 ? mass * p / sum : 0;
    SCOPED_TRACE("round " + std::to_string(round));
    const auto plan = plan_replication(pop, on(devices, max_experts));
    ASSERT_EQ(plan.devices_of_expert.size(), static_cast<size_t>(experts));
    for (const auto& ds : plan.devices_of_expert) {
      ASSERT_FALSE(ds.empty());                                          // every expert placed
      EXPECT_EQ(std::set<int>(ds.begin(), ds.end()).size(), ds.size());  // distinct devices
      for (int d : ds) ASSERT_TRUE(d >= 0 && d < devices);
    }
    for (const auto& es : plan.experts_of_device(devices))  // every slot used
      EXPECT_EQ(static_cast<int>(es.size()), std::min(experts, max_experts));
    // On these instances, never less balanced than plain EP.
    EXPECT_LE(plan.max_over_mean, plan.ep_max_over_mean + 1e-9);
  }
}

TEST(ReplicationPlanner, PhaseTwoTriggersExactlyWhenTopTwoKDiffer) {
  const std::vector<double> est{0.4, 0.3, 0.2, 0.1};
  const auto one = plan_replication(est, on(4));
  const auto same = fine_tune(one, est, {30, 45, 10, 15}, 1, on(4));  // top-2 {0,1} both
  EXPECT_FALSE(same.replanned);
  EXPECT_EQ(same.plan.devices_of_expert, one.devices_of_expert);
  const std::vector<int64_t> moved{30, 10, 45, 15};  // top-2 {2,0}
  const auto two = fine_tune(one, est, moved, 1, on(4));
  EXPECT_TRUE(two.replanned);
  EXPECT_EQ(two.plan.devices_of_expert,
            plan_replication(popularity_of_counts(moved), on(4)).devices_of_expert);
  // Kept or re-planned, the figures are the plan's under the actual counts.
  EXPECT_DOUBLE_EQ(same.plan.max_over_mean,
                   max_over_mean(device_loads(same.plan, {30, 45, 10, 15}, 4)));
  EXPECT_DOUBLE_EQ(same.plan.ep_max_over_mean, 45.0 / 25);
  EXPECT_DOUBLE_EQ(two.plan.ep_max_over_mean, 45.0 / 25);

  std::mt19937_64 rng(3);
  for (int round = 0; round < 200; ++round) {
    const int experts = 4 + static_cast<int>(rng() % 8), k = 1 + static_cast<int>(rng() % 2);
    std::vector<int64_t> est_counts(experts), actual(experts);
    for (int e = 0; e < experts; ++e) {
      est_counts[e] = static_cast<int64_t>(rng() % 6);
      actual[e] = rng() % 2 ? est_counts[e] : static_cast<int64_t>(rng() % 6);
    }
    const auto est_pop = popularity_of_counts(est_counts);
    const auto first = plan_replication(est_pop, on(8));
    const auto out = fine_tune(first, est_pop, actual, k, on(8));
    auto top_a = top_experts(est_pop, 2 * k),
         top_b = top_experts(popularity_of_counts(actual), 2 * k);
    std::sort(top_a.begin(), top_a.end());
    std::sort(top_b.begin(), top_b.end());
    EXPECT_EQ(out.replanned, top_a != top_b) << "round " << round;
  }
}

TEST(ReplicationPlanner, RejectsBadInput) {
  EXPECT_ERROR_HAS(plan_replication({0.5}, on(0)), "devices", "got 0");
  EXPECT_ERROR_HAS(plan_replication({0.5}, on(1, 0)), "max_experts_per_device");
  EXPECT_ERROR_HAS(plan_replication({}, on(1)), "no experts");
  EXPECT_ERROR_HAS(plan_replication({0.1, 0.1, 0.1}, on(1, 2)), "3 experts do not fit",
                   "1 devices x 2");
  EXPECT_ERROR_HAS(plan_replication({0.5, 0.5}, on(8193, 2)), "16386 replica slots",
                   "exceed the 16384");
  EXPECT_ERROR_HAS(plan_replication(std::vector<double>(5000, 0), on(1000, 5)),
                   "1000 devices x 5000 experts exceed the 4194304");
  EXPECT_ERROR_HAS(plan_replication({0.5, -0.1}, on(2)), "popularity[1]", "-0.1");
  EXPECT_ERROR_HAS(plan_replication({0.5, NAN}, on(2)), "popularity[1]");
  EXPECT_ERROR_HAS(plan_replication({0.7, 0.7}, on(2)), "sum to 1.4");
  const auto plan = plan_replication({0.5, 0.5}, on(2));
  EXPECT_ERROR_HAS(fine_tune(plan, {0.5, 0.5}, {1, 1}, 0, on(2)), "top_k");
  EXPECT_ERROR_HAS(fine_tune(plan, {0.5, 0.5}, {1, 1, 1}, 1, on(2)), "2 experts", "counts 3");
  EXPECT_ERROR_HAS(device_loads(plan, {1, 1}, 1), "device 1", "[0, 1)");
  EXPECT_ERROR_HAS(device_loads(plan, {1}, 2), "counts 1");
  EXPECT_ERROR_HAS(device_loads(plan, {1, -2}, 2), "counts[1]");
  EXPECT_ERROR_HAS(device_loads(ReplicationPlan{{{0}, {}}}, {1, 1}, 2), "expert 1 has no device");
  EXPECT_ERROR_HAS(ideal_load({1}, 0), "devices");
  EXPECT_ERROR_HAS(expected_device_loads(plan, {0.5, -0.5}, 2), "load[1]", "-0.5");
  EXPECT_ERROR_HAS(expected_device_loads(plan, {0.5, NAN}, 2), "load[1]");
  EXPECT_ERROR_HAS(expert_parallel_plan(0, 2), "expert-parallel plan", "got 0 and 2");
}

}  // namespace
}  // namespace moecomm::infer
