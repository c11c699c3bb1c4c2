// GradSync (rt/grad_sync.h) under mpirun: every policy gives a plain AllReduce's gradients;
// lina never runs an AllReduce beside an A2A; fsmoe holds a layer until the next dispatch ends;
// a stalled peer ends in CommTimeout. A2As are begin/sleep/end on the activity, or real A2A-v
// on the token path's communicator beside the gradient thread.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <optional>
#include <random>
#include <thread>

#include "core/error.h"
#include "mpi_test_util.h"
#include "rt/collectives.h"
#include "rt/comm_pool.h"
#include "rt/grad_sync.h"

namespace moecomm::rt {
namespace {

using Clock = A2AActivity::Clock;
using Policy = sched::GradSync;
using test::world_rank;
using test::world_size;

constexpr int kEp = 2;  // expert-data-parallel groups: ranks with equal rank % kEp

core::RankGroup edp_group(int pos) {
  core::RankGroup g;
  for (int r = pos; r < world_size(); r += kEp) g.push_back(r);
  return g;
}

// Channel 1: the gradient thread's own communicators; channel 0: the token path's.
std::vector<CommKey> grad_keys() {
  std::vector<CommKey> keys{{test::all_ranks(), 1, "dense grads"}, {test::all_ranks(), 0, "ep"}};
  for (int pos = 0; pos < kEp; ++pos) keys.push_back({edp_group(pos), 1, "expert grads"});
  return keys;
}

void sleep_ms(double ms) {
  std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(ms));
}

// Three layers of dense and expert parameters of odd sizes (one layer without experts),
// holding random per-rank gradients that are multiples of 1/4: sums are exact in any order.
struct Grads {
  std::vector<nn::Tensor> values, grads;
  std::vector<nn::Param> params;
  std::vector<std::vector<nn::Param*>> dense, expert;  // [layer]

  Grads(const Grads&) = delete;  // params point into the vectors
  Grads& operator=(const Grads&) = delete;
  explicit Grads(int scale, uint64_t seed) {
    const std::vector<std::vector<int>> dense_sizes = {{7, 33, 1}, {129, 3}, {2}};
    const std::vector<std::vector<int>> expert_sizes = {{5, 17}, {31}, {}};
    std::mt19937 rng(static_cast<uint32_t>(seed * 7919 + world_rank()));
    std::uniform_int_distribution<int> q(-16, 16);
    values.reserve(16);
    grads.reserve(16);
    params.reserve(16);
    auto add = [&](int size, std::vector<nn::Param*>& into) {
      values.emplace_back(std::vector<int64_t>{size * scale});
      grads.emplace_back(std::vector<int64_t>{size * scale});
      for (int64_t i = 0; i < grads.back().size(); ++i) grads.back().data()[i] = q(rng) / 4.0f;
      params.push_back({"p" + std::to_string(params.size()), &values.back(), &grads.back()});
      into.push_back(&params.back());
    };
    dense.resize(3);
    expert.resize(3);
    for (int l = 0; l < 3; ++l) {
      for (int s : dense_sizes[l]) add(s, dense[l]);
      for (int s : expert_sizes[l]) add(s, expert[l]);
    }
  }
};

class GradSyncTest : public testing::Test {
 protected:
  GradSyncTest() : pool_(MPI_COMM_WORLD, grad_keys()) {}
  const Comm& dense() const { return pool_.at({test::all_ranks(), 1}); }
  const Comm& expert() const { return pool_.at({edp_group(world_rank() % kEp), 1}); }
  const Comm& a2a() const { return pool_.at({test::all_ranks(), 0}); }  // the token path's
  CallOptions options(double timeout_s = test::kTimeout) const {
    return {.label = "grad", .timeout_s = timeout_s, .ranks_per_node = 2};
  }

  // What a plain all_reduce_sum per parameter gives, by parameter.
  std::vector<std::vector<float>> reference(const Grads& g) const {
    std::vector<std::vector<float>> out(g.params.size());
    for (int l = 0; l < 3; ++l) {
      for (const auto& [params, comm] :
           {std::pair{&g.dense[l], &dense()}, {&g.expert[l], &expert()}}) {
        for (const nn::Param* p : *params) {
          std::vector<float>& v = out[static_cast<size_t>(p - g.params.data())];
          v.assign(p->grad->data(), p->grad->data() + p->grad->size());
          all_reduce_sum(*comm, v, options());
        }
      }
    }
    return out;
  }

  CommPool pool_;
};

struct Interval {
  Clock::time_point start, end;
};

// One backward over layers 2, 1, 0: per MoE layer the dispatch A2A, the experts, the combine
// A2A, then the layer's gradients are final. An A2A sleeps a2a_ms, or is a real A2A-v over
// `a2a_comm` when given; ranks compute for different times when `skew`. Returns the A2As'
// running intervals and the times just before each dispatch ended.
struct Backward {
  std::vector<Interval> a2as;
  std::vector<Clock::time_point> dispatch_end;  // [layer]
};
Backward backward(A2AActivity& activity, GradSync& sync, Grads& g, double a2a_ms, double expert_ms,
                  const Comm* a2a_comm = nullptr, bool skew = false) {
  Backward b;
  b.dispatch_end.resize(3);
  auto a2a = [&](A2APhase phase) {
    activity.begin(phase);
    const Clock::time_point start = Clock::now();
    if (a2a_comm) {
      const test::SendBlocks s = test::send_blocks(a2a_comm->group(), world_rank());
      CallOptions o{.label = "test.a2a", .timeout_s = test::kTimeout, .ranks_per_node = 2};
      all_to_all_v<float>(*a2a_comm, s.data, s.counts, sched::Algorithm::kFlat, o);
    } else {
      sleep_ms(a2a_ms);
    }
    b.a2as.push_back({start, Clock::now()});
    activity.end(phase);
  };
  for (int l = 2; l >= 0; --l) {
    const double compute_ms = expert_ms * (skew ? 1 + (world_rank() + l) % 3 : 1);
    a2a(A2APhase::kDispatch);
    b.dispatch_end[l] = b.a2as.back().end;
    sleep_ms(compute_ms);
    a2a(A2APhase::kCombine);
    sync.layer_ready(l, g.dense[l], g.expert[l]);
    sleep_ms(compute_ms);  // the attention's backward
  }
  return b;
}

int64_t expected_micro_ops(const Grads& g, int parts) {
  int64_t n = 0;
  for (int l = 0; l < 3; ++l) {
    for (const auto* params : {&g.dense[l], &g.expert[l]}) {
      int64_t total = 0;
      for (const nn::Param* p : *params) total += p->grad->size();
      n += std::min<int64_t>(total, parts);
    }
  }
  return n;
}

class GradSyncPolicies : public GradSyncTest,
                         public testing::WithParamInterface<std::tuple<Policy, int>> {};

TEST_P(GradSyncPolicies, GiveThePlainAllReduceSum) {
  const auto [policy, parts] = GetParam();
  Grads g(1, 1);
  const std::vector<std::vector<float>> expected = reference(g);
  A2AActivity activity;
  GradSync sync(policy, parts, dense(), &expert(), options(), activity);
  backward(activity, sync, g, 1, 1, &a2a(), true);
  sync.finish();
  for (size_t i = 0; i < g.grads.size(); ++i) {
    EXPECT_EQ(std::vector<float>(g.grads[i].data(), g.grads[i].data() + g.grads[i].size()),
              expected[i])
        << g.params[i].name;
  }
  const GradSyncStats s = sync.stats();
  EXPECT_EQ(s.micro_ops, expected_micro_ops(g, policy == Policy::kBucketed ? 1 : parts));
  EXPECT_EQ(static_cast<size_t>(s.micro_ops), sync.records().size());
}

INSTANTIATE_TEST_SUITE_P(GradSync, GradSyncPolicies,
                         testing::Combine(testing::Values(Policy::kBucketed, Policy::kLina,
                                                          Policy::kFsmoe),
                                          testing::Values(1, 3, 4)));

bool intersects(const Interval& a, const MicroOpRecord& r) {
  return a.start < r.end && r.start < a.end;
}

// Also with real A2As beside the gradient thread and ranks out of step: the agreement must
// not deadlock (an A2A waits for a micro-op that waits for a rank in that A2A).
TEST_F(GradSyncTest, LinaNeverRunsBesideAnA2A) {
  A2AActivity activity;
  GradSync sync(Policy::kLina, 4, dense(), &expert(), options(), activity);
  for (int step = 0; step < 4; ++step) {
    Grads g(200, 2 + step);
    const std::vector<std::vector<float>> expected = reference(g);
    const Backward b = backward(activity, sync, g, 2, 3, step < 2 ? nullptr : &a2a(), step == 3);
    sync.finish();
    for (size_t i = 0; i < g.grads.size(); ++i) {
      ASSERT_EQ(std::vector<float>(g.grads[i].data(), g.grads[i].data() + g.grads[i].size()),
                expected[i]);
    }
    for (const MicroOpRecord& r : sync.records()) {
      for (const Interval& a : b.a2as) EXPECT_FALSE(intersects(a, r)) << "layer " << r.layer;
    }
  }
  const GradSyncStats s = sync.stats();
  EXPECT_EQ(s.overlap_s, 0.0);
  EXPECT_GT(s.votes, s.micro_ops);  // one agreement per micro-op, one barrier per group
  EXPECT_GT(s.allreduce_s, 0.0);
}

TEST_F(GradSyncTest, FsmoeHoldsALayerUntilTheNextDispatchEnds) {
  Grads g(1, 5);
  A2AActivity activity;
  GradSync sync(Policy::kFsmoe, 3, dense(), &expert(), options(), activity);
  const Backward b = backward(activity, sync, g, 2, 5);
  const Clock::time_point finish = Clock::now();
  sync.finish();
  const std::vector<MicroOpRecord> records = sync.records();
  ASSERT_FALSE(records.empty());
  for (const MicroOpRecord& r : records) {
    // Layer l goes in layer l-1's window; layer 0 has none and goes at finish().
    const Clock::time_point opens = r.layer > 0 ? b.dispatch_end[r.layer - 1] : finish;
    EXPECT_GE(r.start, opens) << "layer " << r.layer << " part " << r.part;
  }
}

TEST(GradSyncActivity, AnA2AWaitsForAHeldMicroOpAndHoldsNeedNoA2A) {
  A2AActivity activity;
  std::optional<A2AActivity::Hold> hold = activity.try_hold([](const auto&) { return true; });
  ASSERT_TRUE(hold.has_value());
  std::atomic<bool> issued{false};
  std::thread token_path([&] {
    activity.begin(A2APhase::kDispatch);
    issued = true;
  });
  sleep_ms(20);
  EXPECT_FALSE(issued.load());  // strict priority without preemption (Lina Sec. 4.1)
  EXPECT_EQ(activity.snapshot().pending, 1);
  hold.reset();
  token_path.join();
  EXPECT_TRUE(issued.load());
  EXPECT_FALSE(activity.try_hold([](const auto&) { return true; }).has_value());
  activity.end(A2APhase::kDispatch);
  EXPECT_GT(activity.snapshot().gate_wait_s, 0.01);
  EXPECT_TRUE(activity.try_hold([](const auto&) { return true; }).has_value());
}

TEST(GradSyncActivity, ExpectsTheCombineAfterTheExpertTimeOrTheLayersEstimate) {
  A2AActivity activity;
  activity.begin(A2APhase::kDispatch);
  activity.end(A2APhase::kDispatch);
  EXPECT_FALSE(activity.snapshot().combine_due);  // no expert time measured yet
  sleep_ms(30);
  activity.begin(A2APhase::kCombine);
  activity.end(A2APhase::kCombine);
  activity.begin(A2APhase::kDispatch);
  activity.end(A2APhase::kDispatch);
  const auto due = activity.snapshot().combine_due;
  ASSERT_TRUE(due);
  EXPECT_GT(*due, Clock::now() + std::chrono::milliseconds(15));
  activity.begin(A2APhase::kCombine);
  EXPECT_FALSE(activity.snapshot().combine_due);
  activity.end(A2APhase::kCombine);
  activity.expect_combine_in(0.005);
  EXPECT_TRUE(activity.snapshot().combine_due);
  sleep_ms(20);  // late by more than its lead time: stale
  EXPECT_FALSE(activity.snapshot().combine_due);
  EXPECT_EQ(activity.snapshot().dispatch_ends, 2);
}

// The last rank never hands its gradients over: the others' finish() throws CommTimeout naming
// the op and the rank within the timeout, and the destructor joins. The stalled rank then joins
// the abandoned AllReduce, so no collective is left pending in the job.
TEST_F(GradSyncTest, AStalledPeerEndsInCommTimeout) {
  const int n = world_size(), me = world_rank();
  constexpr int kCount = 1000;
  constexpr double kTimeoutS = 1.0;
  if (me == n - 1) {
    MPI_Barrier(MPI_COMM_WORLD);  // the others have timed out
    std::vector<float> late(kCount, 1.0f);
    all_reduce_sum(dense(), late, options());
  } else {
    nn::Tensor value(std::vector<int64_t>{kCount}), grad(std::vector<int64_t>{kCount}, 1.0f);
    nn::Param p{"w", &value, &grad};
    A2AActivity activity;
    const Clock::time_point start = Clock::now();
    {
      GradSync sync(Policy::kBucketed, 1, dense(), nullptr, options(kTimeoutS), activity);
      sync.layer_ready(0, {&p}, {});
      try {
        sync.finish();
        ADD_FAILURE() << "finish() returned";
      } catch (const CommTimeout& e) {
        const std::string what = e.what();
        EXPECT_NE(what.find("grad.dense.allreduce [layer 0, part 1/1]"), std::string::npos) << what;
        EXPECT_NE(what.find("on rank " + std::to_string(me)), std::string::npos) << what;
      }
    }
    EXPECT_LT(std::chrono::duration<double>(Clock::now() - start).count(), kTimeoutS + 10);
    MPI_Barrier(MPI_COMM_WORLD);
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST_F(GradSyncTest, RejectsPartitionsOutOfRange) {
  A2AActivity activity;
  EXPECT_THROW(GradSync(Policy::kLina, 0, dense(), nullptr, options(), activity), Error);
  EXPECT_THROW(
      GradSync(Policy::kLina, sched::kMaxGradPartitions + 1, dense(), nullptr, options(), activity),
      Error);
}

}  // namespace
}  // namespace moecomm::rt
