// The end of the step (sched/build_optimizer.h): Adam's op per rank with the flops and bytes
// of the parameters it updates, and ZeRO-1/2/3's traffic, against numbers worked by hand.
#include "sched/build_optimizer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "core/rank_groups.h"
#include "sched/build_grad_sync.h"
#include "sched/executor_caps.h"
#include "sched/layer_builder.h"
#include "support/tiny_moe.h"

namespace moecomm::sched {
namespace {

// h 64, f 128, 8 experts (ffn_gemms 2), bf16: per block, the dense part 4 h^2 / tp + h E and
// (E / ep) x 2 h f / esp expert parameters per rank.
LayerSetup setup(const std::string& parallel, const std::string& strategy, bool optimizer) {
  LayerSetup s;
  s.model = testing::tiny_moe_model();
  s.parallel = core::resolve_parallel(core::parse_parallel_spec(parallel, "-"), 4, 8, "-");
  s.cluster.name = "2x2";
  s.cluster.levels = {{"node", 2, 25e9, 10e-6}, {"gpu", 2, 200e9, 3e-6}};
  s.cluster.device = {312e12, 80e9, 1.6e12};
  s.strategy = parse_strategy(strategy, "-");
  s.layers = 2;
  s.optimizer = optimizer;
  return s;
}

std::vector<OpId> ops_of_role(const Schedule& s, OpRole role) {
  std::vector<OpId> out;
  for (OpId id = 0; id < s.num_ops(); ++id)
    if (s.label(id).role == role) out.push_back(id);
  return out;
}

std::vector<OpId> sorted_deps(const Schedule& s, OpId id) {
  std::vector<OpId> out = s.deps(id);
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<const Collective*> collectives(const Schedule& s, OpRole role) {
  std::vector<const Collective*> out;
  for (CollectiveId c = 0; c < s.num_collectives(); ++c)
    if (s.labels()[size_t(s.collective(c).label)].role == role) out.push_back(&s.collective(c));
  return out;
}

// ep=2 on 4 ranks: tp 1, dp 4 (the dense group), esp 1, edp 2. Per block and rank: dense
// 4 x 64^2 + 64 x 8 = 16896 elements, experts 4 x 2 x 64 x 128 = 65536; two blocks.
constexpr double kDense = 2 * 16896.0, kExpert = 2 * 65536.0;

TEST(Optimizer, AdamBytesPerElement) {
  EXPECT_EQ(adam_bytes_per_element(2), 2 + 24 + 2);  // bf16 grad, fp32 states, bf16 weight
  EXPECT_EQ(adam_bytes_per_element(4), 4 + 24);      // fp32: the master is the weight
  EXPECT_EQ(adam_bytes_per_element(1), 1 + 24 + 1);
  EXPECT_EQ(kAdamFlopsPerElement, 14);
}

TEST(Optimizer, ZeroZeroRunsAdamOnEveryParameterAfterEverythingElse) {
  const Schedule s = build_training_step(setup("ep=2", "baseline", true));
  const std::vector<OpId> adam = ops_of_role(s, OpRole::kOptimizer);
  ASSERT_EQ(adam.size(), 4u);
  for (int r = 0; r < 4; ++r) {
    const Op& op = s.op(adam[size_t(r)]);
    EXPECT_EQ(op.rank, r);
    EXPECT_EQ(op.kind, OpKind::kCompute);
    EXPECT_EQ(op.stream, kComputeStream);
    EXPECT_EQ(op.flops, 14 * (kDense + kExpert));
    EXPECT_EQ(op.bytes, 28 * (kDense + kExpert));
    EXPECT_EQ(s.label(adam[size_t(r)]), (Label{OpRole::kOptimizer, -1, Phase::kNone, -1, ""}));
    // The last op of the rank, after the last op of every other stream (the gradient
    // stream's last AllReduce among them) and its compute stream's predecessor.
    EXPECT_EQ(s.ops_of(r).back(), adam[size_t(r)]);
    std::map<int, OpId> last;
    for (OpId id : s.ops_of(r))
      if (id != adam[size_t(r)]) last[s.op(id).stream] = id;
    std::vector<OpId> expected;
    for (const auto& [stream, id] : last)
      if (stream != kComputeStream) expected.push_back(id);
    EXPECT_EQ(sorted_deps(s, adam[size_t(r)]), expected);
    EXPECT_EQ(op.prev, last.at(kComputeStream));
    EXPECT_EQ(s.label(last.at(kGradStream)).role, OpRole::kGradDenseAllReduce);
  }
  EXPECT_TRUE(ops_of_role(s, OpRole::kZeroParamAllGather).empty());
  EXPECT_NO_THROW(s.validate());
}

TEST(Optimizer, ZeroOneShardsAdamAndAllGathersTheUpdatedParameters) {
  const Schedule s = build_training_step(setup("ep=2", "base=baseline,zero=1", true));
  // Adam on 1/4 of the dense and 1/2 of the expert parameters: 8448 + 65536 elements.
  const double updated = kDense / 4 + kExpert / 2;
  ASSERT_EQ(updated, 73984);
  const std::vector<OpId> adam = ops_of_role(s, OpRole::kOptimizer);
  ASSERT_EQ(adam.size(), 4u);
  for (OpId id : adam) {
    EXPECT_EQ(s.op(id).flops, 14 * updated);
    EXPECT_EQ(s.op(id).bytes, 28 * updated);
    EXPECT_EQ(s.label(id).knob, "zero");
  }
  // Per block: one dense AllGather over the 4 ranks of 16896 x 2 bytes and one expert
  // AllGather per edp pair of 65536 x 2 bytes, after Adam on the gradient stream.
  const auto gathers = collectives(s, OpRole::kZeroParamAllGather);
  ASSERT_EQ(gathers.size(), 2u * (1 + 2));
  std::map<std::pair<int, size_t>, int> count;  // (layer, group size)
  for (const Collective* c : gathers) {
    const Label& l = s.labels()[size_t(c->label)];
    EXPECT_EQ(c->kind, OpKind::kAllGather);
    EXPECT_EQ(l.phase, Phase::kNone);
    ++count[{l.layer, c->group.size()}];
    EXPECT_EQ(c->bytes, c->group.size() == 4 ? 16896 * 2.0 : 65536 * 2.0);
    for (size_t i = 0; i < c->group.size(); ++i) {
      const OpId op = c->ops[i];
      EXPECT_EQ(s.op(op).stream, kGradStream);
      EXPECT_EQ(s.deps(op), std::vector<OpId>{adam[size_t(c->group[i])]});
    }
  }
  EXPECT_EQ(count, (std::map<std::pair<int, size_t>, int>{
                       {{0, 4}, 1}, {{0, 2}, 2}, {{1, 4}, 1}, {{1, 2}, 2}}));
  // The gradients still AllReduce whole.
  EXPECT_EQ(collectives(s, OpRole::kGradDenseAllReduce).size(), 2u);
  EXPECT_TRUE(collectives(s, OpRole::kGradDenseReduceScatter).empty());
}

// tp=2, ep=2 on 4 ranks: esp = tp = 2, dp 2, edp 1. The dense shard 4 x 64^2 / 2 + 64 x 8 =
// 8704 per block is sharded over the 2 dp ranks, the experts (4 x 2 x 64 x 128 / 2 = 32768)
// over no one.
TEST(Optimizer, ZeroOneShardsEachPartOverItsOwnGroup) {
  const Schedule s = build_training_step(setup("tp=2,ep=2", "base=baseline,zero=1", true));
  const double updated = 2 * 8704.0 / 2 + 2 * 32768.0;
  for (OpId id : ops_of_role(s, OpRole::kOptimizer)) {
    EXPECT_EQ(s.op(id).flops, 14 * updated);
    EXPECT_EQ(s.op(id).bytes, 28 * updated);
  }
  const auto gathers = collectives(s, OpRole::kZeroParamAllGather);
  ASSERT_EQ(gathers.size(), 2u * 2);  // per block, one per dp pair; no expert group
  for (const Collective* c : gathers) {
    EXPECT_EQ(c->group.size(), 2u);
    EXPECT_EQ(c->bytes, 8704 * 2.0);
  }
}

// Per gradient bucket in the order the schedule declares them: (role, layer, phase, chunk,
// knob, priority, kind, bytes, group, stream of the first member).
using Bucket =
    std::tuple<OpRole, int, Phase, int, std::string, int, OpKind, double, core::RankGroup, int>;
std::vector<Bucket> buckets(const Schedule& s) {
  std::vector<Bucket> out;
  for (CollectiveId c = 0; c < s.num_collectives(); ++c) {
    const Collective& col = s.collective(c);
    const Label& l = s.labels()[size_t(col.label)];
    if (family(l.role) != OpFamily::kGradSync) continue;
    out.emplace_back(l.role, l.layer, l.phase, l.chunk, l.knob, col.priority, col.kind, col.bytes,
                     col.group, s.op(col.ops[0]).stream);
  }
  return out;
}

TEST(Optimizer, ZeroTwoReduceScattersTheSameBucketsInTheSameWindows) {
  for (const std::string base :
       {"base=baseline", "base=lina,grad_partitions=2", "base=fsmoe,grad_partitions=3", "tp=2"}) {
    const bool tp = base == "tp=2";
    const std::string parallel = tp ? "tp=2,ep=2" : "ep=2";
    const std::string strategy = tp ? "base=baseline" : base;
    for (bool optimizer : {false, true}) {
      SCOPED_TRACE(base + (optimizer ? " optimizer" : ""));
      const Schedule all = build_training_step(setup(parallel, strategy, optimizer));
      const Schedule zero2 = build_training_step(setup(parallel, strategy + ",zero=2", optimizer));
      const std::vector<Bucket> a = buckets(all), b = buckets(zero2);
      ASSERT_EQ(a.size(), b.size());
      ASSERT_FALSE(a.empty());
      for (size_t i = 0; i < a.size(); ++i) {
        Bucket expected = a[i];
        auto& role = std::get<0>(expected);
        EXPECT_TRUE(role == OpRole::kGradDenseAllReduce || role == OpRole::kGradExpertAllReduce);
        role = role == OpRole::kGradDenseAllReduce ? OpRole::kGradDenseReduceScatter
                                                   : OpRole::kGradExpertReduceScatter;
        std::get<6>(expected) = OpKind::kReduceScatter;
        EXPECT_EQ(b[i], expected) << i;
      }
      // The buckets wait on the same ops: the schedules differ only in the kinds and roles
      // until the optimizer.
      const std::vector<OpId> rs0 = ops_of_role(zero2, OpRole::kGradDenseReduceScatter);
      const std::vector<OpId> ar0 = ops_of_role(all, OpRole::kGradDenseAllReduce);
      ASSERT_EQ(rs0.size(), ar0.size());
      for (size_t i = 0; i < rs0.size(); ++i)
        EXPECT_EQ(sorted_deps(zero2, rs0[i]), sorted_deps(all, ar0[i]));
      // Without the optimizer nothing gathers the parameters back; with it ZeRO-2 gathers as
      // ZeRO-1 does.
      EXPECT_EQ(ops_of_role(zero2, OpRole::kZeroParamAllGather).empty(), !optimizer);
    }
  }
}

// Without the optimizer, ZeRO-1 only shards what the optimizer keeps: the step is zero=0's.
TEST(Optimizer, WithoutTheOptimizerZeroOneIsZeroZero) {
  const Schedule a = build_training_step(setup("ep=2", "baseline", false));
  const Schedule b = build_training_step(setup("ep=2", "base=baseline,zero=1", false));
  ASSERT_EQ(a.num_ops(), b.num_ops());
  for (OpId id = 0; id < a.num_ops(); ++id) {
    EXPECT_EQ(a.label(id), b.label(id));
    EXPECT_EQ(a.op(id).kind, b.op(id).kind);
    EXPECT_EQ(a.op(id).bytes, b.op(id).bytes);
    EXPECT_EQ(a.op(id).flops, b.op(id).flops);
    EXPECT_EQ(a.deps(id), b.deps(id));
  }
  EXPECT_TRUE(ops_of_role(a, OpRole::kOptimizer).empty());
}

TEST(Optimizer, ZeroThreeGathersEveryBlockBeforeEachPhaseAndNothingAtTheEnd) {
  const Schedule s = build_training_step(setup("ep=2", "base=baseline,zero=3", true));
  // Per (layer, phase, group size): count and bytes.
  std::map<std::tuple<int, Phase, size_t>, int> count;
  for (const Collective* c : collectives(s, OpRole::kZeroParamAllGather)) {
    const Label& l = s.labels()[size_t(c->label)];
    EXPECT_EQ(c->kind, OpKind::kAllGather);
    EXPECT_EQ(c->bytes, c->group.size() == 4 ? 16896 * 2.0 : 65536 * 2.0);
    for (OpId op : c->ops) EXPECT_EQ(s.op(op).stream, kCopyStream);
    ++count[{l.layer, l.phase, c->group.size()}];
  }
  std::map<std::tuple<int, Phase, size_t>, int> expected;
  for (int layer : {0, 1})
    for (Phase phase : {Phase::kForward, Phase::kBackward}) {
      expected[{layer, phase, 4}] = 1;  // the dense part over dp 4
      expected[{layer, phase, 2}] = 2;  // the experts over each edp pair
    }
  EXPECT_EQ(count, expected);
  // The gradients are ReduceScattered; Adam updates the shard.
  EXPECT_EQ(collectives(s, OpRole::kGradDenseReduceScatter).size(), 2u);
  EXPECT_EQ(collectives(s, OpRole::kGradExpertReduceScatter).size(), 4u);
  EXPECT_TRUE(collectives(s, OpRole::kGradDenseAllReduce).empty());
  for (OpId id : ops_of_role(s, OpRole::kOptimizer))
    EXPECT_EQ(s.op(id).flops, 14 * (kDense / 4 + kExpert / 2));
  EXPECT_NO_THROW(s.validate());
}

// Each block's compute waits for its gathered parameters; the gather of the next block starts
// with the previous one (one block ahead), not after it.
TEST(Optimizer, ZeroThreeGathersArePrefetchedOneBlockAhead) {
  const Schedule s = build_training_step(setup("ep=2", "base=baseline,zero=3", false));
  for (int r = 0; r < 4; ++r) {
    // Per (layer, phase): the rank's gathers and the first op after them.
    std::map<std::pair<int, Phase>, std::vector<OpId>> gathers;
    std::map<std::pair<int, Phase>, OpId> first;
    const std::vector<OpId>& ops = s.ops_of(r);
    for (size_t i = 0; i + 1 < ops.size(); ++i) {
      const Label& l = s.label(ops[i]);
      if (l.role != OpRole::kZeroParamAllGather) continue;
      gathers[{l.layer, l.phase}].push_back(ops[i]);
      if (s.label(ops[i + 1]).role != OpRole::kZeroParamAllGather)
        first[{l.layer, l.phase}] = ops[i + 1];
    }
    ASSERT_EQ(first.size(), 4u);
    for (const auto& [key, op] : first) {
      // The block's first op (the forward's attention, the backward's dispatch A2A) waits on
      // both of its gathers.
      EXPECT_EQ(s.label(op).layer, key.first);
      EXPECT_EQ(s.label(op).phase, key.second);
      const std::vector<OpId> deps = s.deps(op);
      for (OpId g : gathers[key]) EXPECT_NE(std::find(deps.begin(), deps.end(), g), deps.end());
    }
    // The second block of each phase gathers from where the first block started.
    const auto fwd = std::make_pair(0, Phase::kForward), bwd = std::make_pair(1, Phase::kBackward);
    EXPECT_EQ(sorted_deps(s, gathers[{1, Phase::kForward}].front()), sorted_deps(s, first[fwd]));
    EXPECT_EQ(sorted_deps(s, gathers[{0, Phase::kBackward}].front()), sorted_deps(s, first[bwd]));
  }
}

// ZeRO-3 needs no optimizer to gather and reduce-scatter: that is how parameters and gradients
// travel.
TEST(Optimizer, ZeroThreeWithoutTheOptimizerStillGathersAndReduceScatters) {
  const Schedule s = build_training_step(setup("ep=2", "base=baseline,zero=3", false));
  EXPECT_EQ(collectives(s, OpRole::kZeroParamAllGather).size(), 2u * 2 * 3);
  EXPECT_EQ(collectives(s, OpRole::kGradDenseReduceScatter).size(), 2u);
  EXPECT_TRUE(ops_of_role(s, OpRole::kOptimizer).empty());
}

// Gradient sync once per step: one collective per bucket and data-parallel group, whatever the
// ZeRO stage.
TEST(Optimizer, GradientsSyncOncePerStep) {
  for (int zero = 0; zero <= 3; ++zero) {
    SCOPED_TRACE(zero);
    const Schedule s =
        build_training_step(setup("ep=2", "base=baseline,zero=" + std::to_string(zero), true));
    // 2 blocks x (1 dense group of 4 + 2 expert pairs).
    EXPECT_EQ(buckets(s).size(), 2u * 3);
    EXPECT_EQ(ops_of_role(s, OpRole::kOptimizer).size(), 4u);
  }
}

TEST(Optimizer, OpsBoundCoversWhatItAdds) {
  for (int zero = 0; zero <= 3; ++zero) {
    SCOPED_TRACE(zero);
    const std::string strategy = "base=baseline,zero=" + std::to_string(zero);
    const LayerSetup with = setup("ep=2", strategy, true);
    const int added = build_training_step(with).num_ops() -
                      build_training_step(setup("ep=2", "baseline", false)).num_ops();
    EXPECT_LE(added, optimizer_ops_bound(with));
    EXPECT_GT(added, 0);
  }
}

// A step of M micro-batches: the gradients travel once (the same buckets as one micro-batch's
// step), the optimizer once per rank at the very end; ZeRO-3 gathers every block in every
// micro-batch's forward and backward.
TEST(Optimizer, MicroBatchesSyncAndStepOnce) {
  for (int zero = 0; zero <= 3; ++zero) {
    SCOPED_TRACE(zero);
    const std::string strategy = "base=baseline,zero=" + std::to_string(zero);
    const LayerSetup one = setup("ep=2", strategy, true);
    LayerSetup four = one;
    four.micro_batches = 4;
    const Schedule a = build_training_step(one), b = build_training_step(four);
    EXPECT_EQ(buckets(a), buckets(b));
    const std::vector<OpId> adam = ops_of_role(b, OpRole::kOptimizer);
    ASSERT_EQ(adam.size(), 4u);
    for (int r = 0; r < 4; ++r) {
      EXPECT_EQ(b.ops_of(r).back() == adam[size_t(r)], zero != 1 && zero != 2);
      EXPECT_EQ(b.op(adam[size_t(r)]).flops,
                a.op(ops_of_role(a, OpRole::kOptimizer)[size_t(r)]).flops);
    }
    std::map<std::tuple<int, Phase, int>, int> gathers;  // (layer, phase, micro-batch)
    for (const Collective* c : collectives(b, OpRole::kZeroParamAllGather)) {
      const Label& l = b.labels()[size_t(c->label)];
      ++gathers[{l.layer, l.phase, l.micro_batch}];
    }
    if (zero == 3) {
      std::map<std::tuple<int, Phase, int>, int> expected;
      for (int layer : {0, 1})
        for (Phase phase : {Phase::kForward, Phase::kBackward})
          for (int m = 0; m < 4; ++m) expected[{layer, phase, m}] = 3;  // dense + 2 expert pairs
      EXPECT_EQ(gathers, expected);
    } else if (zero >= 1) {
      EXPECT_EQ(gathers, (std::map<std::tuple<int, Phase, int>, int>{{{0, Phase::kNone, -1}, 3},
                                                                     {{1, Phase::kNone, -1}, 3}}));
    } else {
      EXPECT_TRUE(gathers.empty());
    }
    EXPECT_NO_THROW(b.validate());
  }
}

// pp=2, ep=2 on 4 ranks (dp 2, edp 1), 2 blocks: each stage holds one block, 16896 dense
// parameters sharded over its dp pair and 65536 expert parameters sharded over no one.
TEST(Optimizer, PipelineStagesStepTheirOwnBlocks) {
  LayerSetup s = setup("pp=2,ep=2", "base=baseline,zero=1", true);
  s.micro_batches = 2;
  const Schedule sched = build_training_step(s);
  const core::RankGroups groups = core::build_rank_groups(s.parallel);
  for (OpId id : ops_of_role(sched, OpRole::kOptimizer)) {
    EXPECT_EQ(sched.op(id).flops, 14 * (16896.0 / 2 + 65536));
    EXPECT_EQ(sched.op(id).bytes, 28 * (16896.0 / 2 + 65536));
  }
  const auto gathers = collectives(sched, OpRole::kZeroParamAllGather);
  ASSERT_EQ(gathers.size(), 2u);
  for (const Collective* c : gathers) {
    const int layer = sched.labels()[size_t(c->label)].layer;
    EXPECT_EQ(c->bytes, 16896 * 2.0);
    ASSERT_EQ(c->group.size(), 2u);
    for (int r : c->group) {
      const auto& pp = groups.of("pp", r);
      EXPECT_EQ(pp[size_t(layer)], r) << "block " << layer << " lives on stage " << layer;
    }
  }
  EXPECT_NO_THROW(sched.validate());
}

// The executors AllReduce whole gradients and update every parameter: they refuse zero > 0
// by the knob's name, before building anything, and run zero=0 with or without the other knobs.
TEST(Optimizer, ExecutorsRefuseZeroByName) {
  for (int zero = 1; zero <= 3; ++zero)
    for (int e = 0; e < kNumExecutors; ++e) {
      const Strategy s = parse_strategy("base=baseline,zero=" + std::to_string(zero), "-");
      EXPECT_EQ(semantic_refusal(s, RunFacts{}, Executor(e)),
                (Refusal{"strategy: zero",
                         "zero=" + std::to_string(zero) +
                             " shards the data-parallel gradients, optimizer states or "
                             "parameters, which the schedule runtime and moecomm.torch do not "
                             "run (zero=0 only); the simulator prices it"}));
    }
  for (int e = 0; e < kNumExecutors; ++e)
    EXPECT_EQ(semantic_refusal(parse_strategy("base=lina,zero=0", "-"), RunFacts{}, Executor(e)),
              std::nullopt);
  // The optimizer and ZeRO's ops are not MoE ops: no executor's MoE binding is asked for them.
  for (OpRole role : {OpRole::kOptimizer, OpRole::kZeroParamAllGather,
                      OpRole::kGradDenseReduceScatter, OpRole::kGradExpertReduceScatter})
    EXPECT_TRUE(binds(Executor::kRuntime, MoePath::kTokens, role));
}

}  // namespace
}  // namespace moecomm::sched
