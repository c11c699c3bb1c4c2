// Lina's replicated and packed inference layer (lina.txt Sec. 5.2, 6.2): on skewed
// routing, for many random valid plans (1..P replicas per expert, packing up to the cap, the
// identity plan = plain EP), the outputs equal the baseline MoE layer's within 1e-5 (fp32);
// a replicated expert's rows are split evenly among its replicas; swaps are counted; invalid
// or mismatched plans are clear errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>

#include "../support/expect_error.h"
#include "mpi_test_util.h"
#include "nn/moe_layer_factory.h"
#include "rt/comm_pool.h"
#include "rt/mpi_token_exchange.h"
#include "rt/replicated_moe.h"
#include "world_comm_test.h"

namespace moecomm::rt {
namespace {

using nn::GateKind;
using nn::Tensor;

constexpr int kRanksPerNode = test::WorldCommTest::kRanksPerNode;
constexpr int kHidden = 8;

nn::MoeLayerSpec spec_of(int experts, GateKind gate = GateKind::kGShard, float cf = 0.0f,
                         core::FfnType ffn_type = core::FfnType::kGelu) {
  nn::MoeLayerSpec s;
  s.hidden = kHidden;
  s.ffn_hidden = 12;
  s.experts = experts;
  s.top_k = 2;
  s.gate = gate;
  s.ffn_type = ffn_type;
  s.capacity_factor = cf;
  s.expert_choice_capacity = 1.5f;
  s.seed = 11;
  return s;
}

// Skewed routing: every token carries the same large bias, so the few experts whose gate
// columns align with it are popular (Lina Fig. 9's skew).
Tensor skewed_tokens(int rank) {
  Tensor x = Tensor::randn({10 + 3 * rank, kHidden}, 500 + 31 * static_cast<uint64_t>(rank));
  const Tensor bias = Tensor::randn({1, kHidden}, 99, 3.0f);
  nn::add_row_vector(x, bias);
  return x;
}

// A random valid plan: every expert on a random rank with room, then up to P - 1 extra
// replicas on distinct ranks with room, in random replica order.
ReplicaPlan random_plan(std::mt19937& rng, int experts, int ranks, int max_per) {
  std::vector<int> load(static_cast<size_t>(ranks), 0);
  ReplicaPlan plan(static_cast<size_t>(experts));
  const auto room = [&](const std::vector<int>& taken) {
    std::vector<int> out;
    for (int d = 0; d < ranks; ++d)
      if (load[static_cast<size_t>(d)] < max_per &&
          std::find(taken.begin(), taken.end(), d) == taken.end())
        out.push_back(d);
    std::shuffle(out.begin(), out.end(), rng);
    return out;
  };
  const auto place = [&](std::vector<int>& devices, int d) {
    devices.push_back(d);
    ++load[static_cast<size_t>(d)];
  };
  for (std::vector<int>& devices : plan) place(devices, room(devices).at(0));
  for (std::vector<int>& devices : plan) {
    const int want = std::uniform_int_distribution<int>(1, ranks)(rng);
    for (int d : room(devices))
      if (static_cast<int>(devices.size()) < want) place(devices, d);
    std::shuffle(devices.begin(), devices.end(), rng);
  }
  return plan;
}

ReplicaPlan everywhere(int experts, int ranks) {
  ReplicaPlan plan(static_cast<size_t>(experts), std::vector<int>(static_cast<size_t>(ranks)));
  for (std::vector<int>& d : plan) std::iota(d.begin(), d.end(), 0);
  return plan;
}

std::vector<int> all_gather_ints(const std::vector<int>& mine) {
  std::vector<int> all(mine.size() * static_cast<size_t>(test::world_size()));
  MPI_Allgather(mine.data(), static_cast<int>(mine.size()), MPI_INT, all.data(),
                static_cast<int>(mine.size()), MPI_INT, MPI_COMM_WORLD);
  return all;
}

class Replicated : public test::WorldCommTest {
 protected:
  // The baseline: plain EP over MpiTokenExchange, same spec, on this rank's tokens.
  Tensor baseline(const nn::MoeLayerSpec& spec, const Tensor& x, LinkBytes* bytes = nullptr) {
    MpiTokenExchange exchange(world(), options());
    const Tensor y = nn::make_moe_layer(spec, exchange)->forward(x);
    if (bytes) *bytes = exchange.bytes();
    return y;
  }
};

TEST_F(Replicated, OutputsEqualTheBaselineForEveryRandomPlan) {
  const int p = test::world_size(), me = test::world_rank();
  struct Case {
    int experts;
    GateKind gate;
    float cf;
    core::FfnType ffn_type;
  };
  const Case cases[] = {{2 * p, GateKind::kGShard, 0.0f, core::FfnType::kGelu},
                        {2 * p, GateKind::kGShard, 1.0f, core::FfnType::kGelu},
                        {2 * p, GateKind::kExpertChoice, 0.0f, core::FfnType::kSwiglu},
                        {p, GateKind::kSigmoid, 0.0f, core::FfnType::kGelu}};
  std::mt19937 rng(2024);  // the same plans on every rank
  int plans = 0;
  for (const Case& c : cases) {
    nn::MoeLayerSpec spec = spec_of(c.experts, c.gate, c.cf, c.ffn_type);
    if (c.gate == GateKind::kSigmoid) spec.top_k = 1;
    const Tensor x = skewed_tokens(me);
    const Tensor ref = baseline(spec, x);
    const int least = c.experts / p;
    for (int max_per : {least, least + 1, c.experts}) {
      ReplicatedMoeLayer layer(spec, world(), options(), max_per);
      std::vector<ReplicaPlan> todo = {identity_plan(c.experts, p)};
      for (int i = 0; i < 6; ++i) todo.push_back(random_plan(rng, c.experts, p, max_per));
      if (max_per == c.experts) {
        todo.push_back(everywhere(c.experts, p));
        todo.push_back(ReplicaPlan(static_cast<size_t>(c.experts), {p - 1}));  // all packed
      }
      for (const ReplicaPlan& plan : todo) {
        SCOPED_TRACE(::testing::Message()
                     << "experts " << c.experts << " gate " << int(c.gate) << " cf " << c.cf
                     << " max " << max_per << " plan " << plans);
        layer.set_plan(plan);
        EXPECT_LE(nn::max_abs_diff(layer.forward(x), ref), 1e-5f);
        ++plans;
      }
    }
  }
  EXPECT_GE(plans, 40);
}

// The routing is skewed, and each source's rows of expert e are cut into pieces of
// floor(n / k) or ceil(n / k) rows, one per replica; ranks without a replica get none.
TEST_F(Replicated, ReplicatedExpertsSplitTheirTokensEvenly) {
  const int p = test::world_size(), me = test::world_rank(), experts = 2 * p;
  const nn::MoeLayerSpec spec = spec_of(experts);
  ReplicatedMoeLayer layer(spec, world(), options(), experts);
  std::mt19937 rng(7);
  for (int trial = 0; trial < 6; ++trial) {
    const ReplicaPlan plan =
        trial == 0 ? everywhere(experts, p) : random_plan(rng, experts, p, experts);
    layer.set_plan(plan);
    layer.forward(skewed_tokens(me));
    const std::vector<int> counts = all_gather_ints(layer.order_plan().counts);  // [src][e]
    const std::vector<int> got = all_gather_ints(layer.received());              // [d][src][e]
    std::vector<int> load(static_cast<size_t>(experts), 0);
    for (int src = 0; src < p; ++src)
      for (int e = 0; e < experts; ++e) {
        const int n = counts[static_cast<size_t>(src * experts + e)];
        const std::vector<int>& devices = plan[static_cast<size_t>(e)];
        const int k = static_cast<int>(devices.size());
        int sum = 0;
        for (int d = 0; d < p; ++d) {
          const int rows = got[static_cast<size_t>((d * p + src) * experts + e)];
          if (std::find(devices.begin(), devices.end(), d) == devices.end()) {
            EXPECT_EQ(rows, 0) << "rank " << d << " hosts no replica of expert " << e;
            continue;
          }
          EXPECT_TRUE(rows == n / k || rows == (n + k - 1) / k)
              << "src " << src << " expert " << e << " rank " << d << ": " << rows << " of " << n
              << " over " << k;
          sum += rows;
        }
        EXPECT_EQ(sum, n);
        load[static_cast<size_t>(e)] += n;
      }
    // Skewed: the most popular expert has at least twice the mean load.
    const int total = std::accumulate(load.begin(), load.end(), 0);
    EXPECT_GE(*std::max_element(load.begin(), load.end()) * experts, 2 * total);
  }
}

TEST_F(Replicated, SplitRowsIsContiguousEvenAndRotatedBySource) {
  EXPECT_EQ(split_rows(7, 3, 0), (std::vector<int>{3, 2, 2}));
  EXPECT_EQ(split_rows(7, 3, 1), (std::vector<int>{2, 3, 2}));
  EXPECT_EQ(split_rows(2, 4, 3), (std::vector<int>{1, 0, 0, 1}));
  EXPECT_EQ(split_rows(0, 2, 1), (std::vector<int>{0, 0}));
}

// The identity plan sends exactly the baseline's rows: the same bytes by link level. Any plan
// moves every routed row once each way: the same total over ranks.
TEST_F(Replicated, BytesByLinkLevelMatchTheBaseline) {
  const int p = test::world_size(), me = test::world_rank(), experts = 2 * p;
  const nn::MoeLayerSpec spec = spec_of(experts);
  const Tensor x = skewed_tokens(me);
  LinkBytes base;
  baseline(spec, x, &base);
  ReplicatedMoeLayer layer(spec, world(), options(), experts);
  layer.set_plan(identity_plan(experts, p));
  layer.forward(x);
  EXPECT_EQ(layer.bytes(), base);
  EXPECT_GT(layer.meta_bytes().total(), 0);
  std::mt19937 rng(3);
  layer.set_plan(random_plan(rng, experts, p, experts));
  layer.reset_bytes();
  layer.forward(x);
  int64_t sums[2] = {base.total(), layer.bytes().total()}, all[2] = {};
  MPI_Allreduce(sums, all, 2, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
  EXPECT_EQ(all[0], all[1]);
}

// Rank r: identity {2r, 2r + 1} (2 swaps), then {2r + 1, 2r + 2 mod E} (1 more: 2r + 1 stays),
// the same plan again (none), identity again (1 more).
TEST_F(Replicated, SwapsCountOnlyExpertsNotAlreadyResident) {
  const int p = test::world_size(), me = test::world_rank(), experts = 2 * p;
  const nn::MoeLayerSpec spec = spec_of(experts);
  ReplicatedMoeLayer layer(spec, world(), options(), 2);
  ReplicaPlan shifted(static_cast<size_t>(experts));
  for (int r = 0; r < p; ++r) {
    shifted[static_cast<size_t>(2 * r + 1)] = {r};
    shifted[static_cast<size_t>((2 * r + 2) % experts)] = {r};
  }
  const Tensor x = skewed_tokens(me);
  const Tensor ref = baseline(spec, x);
  int64_t expert_bytes = 0;
  // The expert outlives the loop: params() points into it.
  const auto expert = nn::make_expert(spec.ffn_type, spec.hidden, spec.ffn_hidden, 0);
  for (const nn::Param& q : expert->params())
    expert_bytes += q.value->size() * static_cast<int64_t>(sizeof(float));
  const std::pair<ReplicaPlan, int64_t> steps[] = {
      {identity_plan(experts, p), 2}, {shifted, 3}, {shifted, 3}, {identity_plan(experts, p), 4}};
  for (const auto& [plan, swaps] : steps) {
    layer.set_plan(plan);
    EXPECT_EQ(layer.swaps(), swaps);
    EXPECT_EQ(layer.swapped_bytes(), swaps * expert_bytes);
    EXPECT_EQ(layer.resident_experts().size(), 2u);
    EXPECT_LE(nn::max_abs_diff(layer.forward(x), ref), 1e-5f);
  }
}

TEST_F(Replicated, InvalidPlansAreClearErrors) {
  const int p = test::world_size(), experts = 2 * p;
  const nn::MoeLayerSpec spec = spec_of(experts);
  EXPECT_ERROR_HAS(ReplicatedMoeLayer(spec, world(), options(), 0), "max experts per device");
  ReplicatedMoeLayer layer(spec, world(), options(), 2);
  EXPECT_ERROR_HAS(layer.forward(skewed_tokens(0)), "needs a plan");
  ReplicaPlan plan = identity_plan(experts, p);
  ReplicaPlan bad(plan.begin(), plan.end() - 1);
  EXPECT_ERROR_HAS(layer.set_plan(bad), "replication plan",
                   "has " + std::to_string(experts - 1) + " experts");
  bad = plan;
  bad[3] = {};
  EXPECT_ERROR_HAS(layer.set_plan(bad), "expert 3 has no device");
  bad = plan;
  bad[1] = {0, p};
  EXPECT_ERROR_HAS(layer.set_plan(bad), "expert 1: rank " + std::to_string(p) + " is outside");
  bad[1] = {-1};
  EXPECT_ERROR_HAS(layer.set_plan(bad), "expert 1: rank -1 is outside");
  bad[1] = {1, 1};
  EXPECT_ERROR_HAS(layer.set_plan(bad), "expert 1: rank 1 repeats");
  bad = plan;
  bad[2] = {0};  // rank 0: experts 0, 1, 2
  EXPECT_ERROR_HAS(layer.set_plan(bad), "rank 0 hosts 3 experts, at most 2 per device");
  EXPECT_ERROR_HAS(identity_plan(experts + 1, p), "multiple of the EP size");
}

// A rank that runs another plan than the others: every rank fails the forward with a clear
// error (the fingerprints in the metadata A2A differ), and the layer works again afterwards.
TEST_F(Replicated, RanksWithDifferentPlansFailClearly) {
  const int p = test::world_size(), me = test::world_rank(), experts = 2 * p;
  const nn::MoeLayerSpec spec = spec_of(experts);
  ReplicatedMoeLayer layer(spec, world(), options(), experts);
  ReplicaPlan plan = identity_plan(experts, p);
  if (me == 0) plan[0].push_back(p - 1);
  layer.set_plan(plan);
  const Tensor x = skewed_tokens(me);
  EXPECT_ERROR_HAS(layer.forward(x), "another replication plan", "same plan");
  layer.set_plan(identity_plan(experts, p));
  EXPECT_LE(nn::max_abs_diff(layer.forward(x), baseline(spec, x)), 1e-5f);
}

}  // namespace
}  // namespace moecomm::rt
