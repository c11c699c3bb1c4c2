#include "sched/layer_builder.h"
#include "sched/build_hybridep.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <numeric>
#include <set>

#include "core/rank_groups.h"
#include "sched/build_grad_sync.h"
#include "sched/build_hybridep.h"
#include "sched/layer_workload.h"
#include "support/expect_error.h"
#include "support/tiny_moe.h"

namespace moecomm::sched {
namespace {

LayerSetup setup(const std::string& parallel, const std::string& strategy, int layers = 2) {
  LayerSetup s;
  s.model = testing::tiny_moe_model();
  s.parallel = core::resolve_parallel(core::parse_parallel_spec(parallel, "-"), 8, 8, "-");
  s.cluster = testing::tiny_cluster();
  s.strategy = parse_strategy(strategy, "-");
  s.layers = layers;
  return s;
}

// Uniform-but-skewed NetMoE matrices: member i sends (i + j + 1) x 100 bytes to j.
std::vector<std::vector<double>> skewed_pairs(const LayerSetup& s) {
  std::vector<std::vector<double>> out;
  for (const auto& g : core::build_rank_groups(s.parallel).ep) {
    const size_t n = g.size();
    std::vector<double> m(n * n);
    for (size_t i = 0; i < n; ++i)
      for (size_t j = 0; j < n; ++j) m[i * n + j] = double(i + j + 1) * 100;
    out.push_back(m);
  }
  return out;
}

std::vector<const Collective*> collectives(const Schedule& s, const std::string& name) {
  std::vector<const Collective*> out;
  for (CollectiveId c = 0; c < s.num_collectives(); ++c)
    if (s.labels()[s.collective(c).label].name() == name) out.push_back(&s.collective(c));
  return out;
}

const Label& label_of(const Schedule& s, const Collective* c) {
  return s.labels()[c->label];
}

double row_sum(const Collective& c, int member) {
  double sum = 0;
  for (int j = 0; j < c.size(); ++j) sum += c.pair(member, j);
  return sum;
}

double total_flops(const Schedule& s) {
  return s.totals()[size_t(OpKind::kCompute)].flops;
}

const char* kConfigs[] = {"ep=8", "tp=2,esp=2,ep=4",      "tp=4,esp=4,ep=2",
                          "ep=4", "tp=2,esp=2,ep=2,pp=2", "esp=2,ep=4"};

TEST(LayerBuilder, EveryNamedStrategyValidatesOnEveryConfig) {
  for (const char* parallel : kConfigs)
    for (const auto& name : strategy_names()) {
      LayerSetup s = setup(parallel, name);
      if (name == "netmoe") s.a2a_pair_bytes = skewed_pairs(s);
      const Schedule sched = build_training_step(s);
      EXPECT_NO_THROW(sched.validate()) << parallel << " " << name;
      EXPECT_GT(sched.num_ops(), 0);
    }
}

// Traces and timelines name a step's rows by what the stream carries: the A2As run on "token
// comm", the gradient AllReduces on "grad sync", the kernels (but NetMoE's solve) on "compute".
TEST(LayerBuilder, StreamsAreNamedByWhatTheyCarry) {
  const Schedule base = build_training_step(setup("ep=8", "baseline"));
  EXPECT_EQ(base.stream_name(kComputeStream), "compute");
  EXPECT_EQ(base.stream_name(kTokenStream), "token comm");
  EXPECT_EQ(base.stream_name(kGradStream), "grad sync");
  EXPECT_EQ(base.stream_name(kCopyStream), "copy/prefetch");
  EXPECT_EQ(base.stream_name(kIntraStream), "intra-node comm");
  EXPECT_EQ(base.stream_name(kPlacementStream), "placement solve");
  for (const auto& name : strategy_names()) {
    LayerSetup s = setup("tp=2,esp=2,ep=4", name);
    if (name == "netmoe") s.a2a_pair_bytes = skewed_pairs(s);
    const Schedule sched = build_training_step(s);
    for (OpId id = 0; id < sched.num_ops(); ++id) {
      const Op& op = sched.op(id);
      const std::string label(sched.label(id).name());
      const std::string stream = sched.stream_name(op.stream);
      if (op.kind == OpKind::kAllToAll) {
        EXPECT_EQ(stream, "token comm") << name << " " << sched.describe(id);
      }
      if (label.starts_with("grad.")) {
        EXPECT_EQ(stream, "grad sync") << name << " " << sched.describe(id);
      }
      if (op.kind == OpKind::kCompute && label != "moe.netmoe.solve") {
        EXPECT_EQ(stream, "compute") << name << " " << sched.describe(id);
      }
    }
  }
}

TEST(LayerBuilder, WorkloadFormulas) {
  const LayerSetup s = setup("tp=2,esp=2,ep=4", "baseline");
  const LayerWorkload w = layer_workload(s.model, s.parallel);
  EXPECT_DOUBLE_EQ(w.tokens, 64);
  EXPECT_DOUBLE_EQ(w.routed_tokens, 128);  // dropless: t k
  EXPECT_DOUBLE_EQ(w.a2a_bytes, 128 * 64 * 2);
  EXPECT_DOUBLE_EQ(w.attention_flops, 64 * (8.0 * 64 * 64 + 4.0 * 32 * 64) / 2);
  EXPECT_DOUBLE_EQ(w.gate_flops, 2.0 * 64 * 64 * 8);
  EXPECT_DOUBLE_EQ(w.expert_flops, 2.0 * 2 * 128 * 64 * 128 / 2);
  EXPECT_DOUBLE_EQ(w.dense_grad_bytes, (4.0 * 64 * 64 / 2 + 64 * 8) * 2);
  EXPECT_DOUBLE_EQ(w.expert_param_bytes, 2.0 * (2.0 * 64 * 128) / 2 * 2);
  core::ModelConfig capped = s.model;
  capped.capacity_factor = 1.25;
  EXPECT_DOUBLE_EQ(layer_workload(capped, s.parallel).routed_tokens, 160);
}

// Expert flops per rank derived by hand: 2 flops x ffn_gemms (2) x rows x h (64) x f / esp.
TEST(LayerBuilder, ExpertFlopsPerRankByHand) {
  struct Case {
    const char* spec;
    double expected;
  };
  const Case cases[] = {
      // No sharding: the rank's 128 routed rows arrive balanced, full FFN.
      {"ep=8", 2.0 * 2 * 128 * 64 * 128},
      // tp = 1, esp = 2: the EP A2A brings 128 rows, the ESP AllGather the partner's 128 more;
      // a half FFN (f / 2 = 64) on 256 rows.
      {"esp=2,ep=4", 2.0 * 2 * 256 * 64 * 64},
      // tp = esp = 2: the pair shares 64 tokens (128 routed rows), each member computes its
      // half FFN on all of them (dropped then gathered, or replicated).
      {"tp=2,esp=2,ep=4", 2.0 * 2 * 128 * 64 * 64},
      // tp = 4, esp = 2: replicated TP copies, 128 rows arrive, no AllGather; half FFN.
      {"tp=4,esp=2,ep=4", 2.0 * 2 * 128 * 64 * 64},
      // tp = 2, esp = 4: the ESP group holds two TP groups' token sets, 2 x 128 rows, each
      // member a quarter FFN (f / 4 = 32).
      {"tp=2,esp=4,ep=2", 2.0 * 2 * 256 * 64 * 32},
      // tp = esp = 4: one token set of 128 rows, a quarter FFN.
      {"tp=4,esp=4,ep=2", 2.0 * 2 * 128 * 64 * 32},
  };
  for (const Case& c : cases)
    EXPECT_DOUBLE_EQ(
        layer_workload(testing::tiny_moe_model(), setup(c.spec, "baseline").parallel).expert_flops,
        c.expected)
        << c.spec;
}

// The schedule's forward expert op on every rank runs the workload's flops, and they are the
// rows the schedule's own dispatch delivers there: the A2A's column (what the rank receives,
// own share included), or the ESP AllGather's output where there is one, each row taking
// 2 ffn_gemms h f / esp.
TEST(LayerBuilder, ExpertFlopsAreTheRowsTheScheduleDelivers) {
  int checked = 0;
  for (int tp : {1, 2, 4})
    for (int esp : {1, 2, 4})
      for (const char* strategy : {"baseline", "monta-o1"}) {
        const std::string spec =
            "tp=" + std::to_string(tp) + ",esp=" + std::to_string(esp) + ",ep=2";
        const std::string what = spec + " " + strategy;
        const LayerSetup s = setup(spec, strategy);
        const bool drop = std::string(strategy) == "monta-o1" && tp > 1;
        if ((esp > 1 && tp > 1 && tp % esp != 0) || (drop && tp != esp)) {
          EXPECT_THROW(build_training_step(s), Error) << what;
          continue;
        }
        const Schedule sched = build_training_step(s);
        const LayerWorkload w = layer_workload(s.model, s.parallel);
        const double per_row = 2.0 * s.model.ffn_gemms() * 64 * 128 / esp;
        for (int r = 0; r < sched.world_size(); ++r) {
          double received = 0, gathered = -1, flops = -1;
          for (OpId id : sched.ops_of(r)) {
            const Label& label = sched.label(id);
            if (label.phase != Phase::kForward || label.layer != 0) continue;
            const Op& op = sched.op(id);
            if (label.role == OpRole::kDispatchA2A) {
              const Collective& c = sched.collective(op.collective);
              for (int i = 0; i < c.size(); ++i) received += c.pair(i, op.member);
            } else if (label.role == OpRole::kDispatchEspAllGather) {
              gathered = sched.collective(op.collective).bytes;
            } else if (label.role == OpRole::kExpert) {
              flops = op.flops;
            }
          }
          EXPECT_EQ(gathered >= 0, esp > 1 && (drop || tp == 1)) << what;
          const double bytes = gathered >= 0 ? gathered : received;
          ASSERT_GT(bytes, 0) << what << " rank " << r;
          EXPECT_DOUBLE_EQ(flops, bytes / w.token_bytes * per_row) << what << " rank " << r;
          EXPECT_DOUBLE_EQ(flops, w.expert_flops) << what << " rank " << r;
        }
        ++checked;
      }
  EXPECT_EQ(checked, 13);  // 18 less tp=2,esp=4 twice and the 3 other drops with tp != esp
}

TEST(LayerBuilder, BaselineHasTwoA2AsPerLayerAndPhaseWithTheWorkloadsBytes) {
  const LayerSetup s = setup("ep=8", "baseline");
  const Schedule sched = build_training_step(s);
  const LayerWorkload w = layer_workload(s.model, s.parallel);
  std::map<std::tuple<int, Phase>, int> count;
  for (const auto* name : {"moe.dispatch.a2a", "moe.combine.a2a"})
    for (const Collective* c : collectives(sched, name)) {
      ++count[{label_of(sched, c).layer, label_of(sched, c).phase}];
      EXPECT_EQ(c->algorithm, Algorithm::kFlat);
      EXPECT_EQ(c->group, (core::RankGroup{0, 1, 2, 3, 4, 5, 6, 7}));
      EXPECT_EQ(c->priority, 0);
      for (int i = 0; i < 8; ++i) {
        EXPECT_DOUBLE_EQ(row_sum(*c, i), w.a2a_bytes);
        EXPECT_DOUBLE_EQ(c->pair(i, (i + 1) % 8), w.a2a_bytes / 8);
        EXPECT_DOUBLE_EQ(sched.op(c->ops[i]).bytes, w.a2a_bytes * 7 / 8);
        EXPECT_EQ(sched.op(c->ops[i]).stream, kTokenStream);
      }
    }
  ASSERT_EQ(count.size(), 4u);
  for (const auto& [key, n] : count) EXPECT_EQ(n, 2);
  // ep=8 on 8 ranks: dp=8 reduces dense gradients once per layer (one bucket each, issued
  // when the layer's backward made them), edp=1 has no expert AllReduce.
  const auto dense = collectives(sched, "grad.dense.allreduce");
  ASSERT_EQ(dense.size(), 2u);
  for (const Collective* c : dense) {
    EXPECT_DOUBLE_EQ(c->bytes, w.dense_grad_bytes);
    EXPECT_EQ(c->priority, 0);
    EXPECT_EQ(sched.op(c->ops[0]).stream, kGradStream);
  }
  EXPECT_TRUE(collectives(sched, "grad.expert.allreduce").empty());
  // Hierarchical A2A is only the algorithm tag.
  const Schedule hier = build_training_step(setup("ep=8", "hier-a2a"));
  for (const Collective* c : collectives(hier, "moe.dispatch.a2a"))
    EXPECT_EQ(c->algorithm, Algorithm::k2DH);
  EXPECT_EQ(hier.num_ops(), sched.num_ops());
}

TEST(LayerBuilder, TotalsCountEveryOpOfTheStep) {
  const LayerSetup s = setup("ep=8", "baseline");
  const Schedule sched = build_training_step(s);
  const LayerWorkload w = layer_workload(s.model, s.parallel);
  const Totals t = sched.totals();
  // Per rank and layer: attention, gate, experts forward; twice each backward.
  EXPECT_DOUBLE_EQ(t[size_t(OpKind::kCompute)].flops,
                   8 * 2 * 3 * (w.attention_flops + w.gate_flops + w.expert_flops));
  EXPECT_EQ(t[size_t(OpKind::kCompute)].ops, 8 * 2 * 2 * 3);
  EXPECT_EQ(t[size_t(OpKind::kAllToAll)].ops, 8 * 2 * 2 * 2);
  EXPECT_DOUBLE_EQ(t[size_t(OpKind::kAllToAll)].bytes, 8 * 2 * 2 * 2 * w.a2a_bytes * 7 / 8);
  EXPECT_EQ(t[size_t(OpKind::kAllReduce)].ops, 8 * 2);  // a dense bucket per layer
}

TEST(LayerBuilder, DropAllGatherSendsOneTpthAndGathersOverTheTpGroup) {
  const LayerSetup rep = setup("tp=4,esp=4,ep=2", "baseline");
  const LayerSetup drop = setup("tp=4,esp=4,ep=2", "monta-o1");
  const Schedule a = build_training_step(rep), b = build_training_step(drop);
  const LayerWorkload w = layer_workload(rep.model, rep.parallel);
  const auto ra = collectives(a, "moe.dispatch.a2a"), rb = collectives(b, "moe.dispatch.a2a");
  ASSERT_EQ(ra.size(), rb.size());
  for (size_t k = 0; k < ra.size(); ++k)
    EXPECT_DOUBLE_EQ(row_sum(*rb[k], 0) * 4, row_sum(*ra[k], 0));
  EXPECT_DOUBLE_EQ(row_sum(*ra[0], 0), w.a2a_bytes);
  // Replicated: the ESP shards' partial outputs are AllReduced; no AllGather.
  EXPECT_EQ(collectives(a, "moe.combine.esp_allreduce").size(), 2u * 2 * 2);
  EXPECT_TRUE(collectives(a, "moe.dispatch.esp_allgather").empty());
  // Drop: ESP AllGather restores the tokens (esp = tp group), ReduceScatter after the experts,
  // TP AllGather after the combine; per layer and phase, one per ESP/TP group.
  const auto tp = core::build_rank_groups(drop.parallel).tp;
  for (const auto* name : {"moe.dispatch.esp_allgather", "moe.combine.esp_reducescatter",
                           "moe.combine.tp_allgather"}) {
    const auto cs = collectives(b, name);
    EXPECT_EQ(cs.size(), 2u * 2 * 2) << name;
    for (const Collective* c : cs) {
      EXPECT_TRUE(c->group == tp[0] || c->group == tp[1]);
      EXPECT_DOUBLE_EQ(c->bytes, w.a2a_bytes);  // 4 ranks x a2a_bytes / 4
      EXPECT_EQ(b.op(c->ops[0]).stream, kIntraStream);
    }
  }
  EXPECT_TRUE(collectives(b, "moe.combine.esp_allreduce").empty());
  EXPECT_DOUBLE_EQ(total_flops(a), total_flops(b));
}

TEST(LayerBuilder, ChunksSplitTheA2AIntoPiecesThatSumToTheWhole) {
  const Schedule one = build_training_step(setup("tp=4,esp=4,ep=2", "monta-o1"));
  const Schedule four = build_training_step(setup("tp=4,esp=4,ep=2", "monta-o2"));
  for (const auto* name : {"moe.dispatch.a2a", "moe.combine.a2a", "moe.dispatch.esp_allgather"}) {
    const auto whole = collectives(one, name), pieces = collectives(four, name);
    ASSERT_EQ(pieces.size(), 4 * whole.size()) << name;
    // Sum, per (group, layer, phase), the pieces' bytes.
    std::map<std::tuple<int, int, Phase>, double> sum_one, sum_four;
    std::map<std::tuple<int, int, Phase>, std::vector<int>> chunks;
    auto key = [&](const Schedule& s, const Collective* c) {
      return std::tuple{c->group[0], label_of(s, c).layer, label_of(s, c).phase};
    };
    for (const Collective* c : whole)
      sum_one[key(one, c)] += c->kind == OpKind::kAllToAll ? row_sum(*c, 0) : c->bytes;
    for (const Collective* c : pieces) {
      sum_four[key(four, c)] += c->kind == OpKind::kAllToAll ? row_sum(*c, 0) : c->bytes;
      chunks[key(four, c)].push_back(label_of(four, c).chunk);
    }
    ASSERT_EQ(sum_one.size(), sum_four.size());
    for (const auto& [k, v] : sum_one) {
      EXPECT_DOUBLE_EQ(sum_four[k], v);
      EXPECT_EQ(chunks[k], (std::vector<int>{0, 1, 2, 3}));
    }
  }
}

// MoNTA Fig. 15: AllGather chunk i waits for A2A chunk i on another stream, so A2A i + 1 can
// run beside it; the experts wait for every chunk's copy. O2 copies on the AllGather's
// stream, O3 on the copy stream.
TEST(LayerBuilder, MontaPipelinesA2AWithAllGatherAndCopies) {
  for (const char* name : {"monta-o2", "monta-o3"}) {
    const LayerSetup s = setup("tp=4,esp=4,ep=2", name);
    const Schedule sched = build_training_step(s);
    const int rank = 0;
    std::vector<OpId> a2a, ag, copy, expert;
    for (OpId id : sched.ops_of(rank)) {
      const Label& l = sched.label(id);
      if (l.layer != 0 || l.phase != Phase::kForward) continue;
      if (l.name() == "moe.dispatch.a2a") a2a.push_back(id);
      if (l.name() == "moe.dispatch.esp_allgather") ag.push_back(id);
      if (l.name() == "moe.dispatch.esp_allgather.copy") copy.push_back(id);
      if (l.name() == "moe.expert") expert.push_back(id);
    }
    ASSERT_EQ(a2a.size(), 4u);
    ASSERT_EQ(ag.size(), 4u);
    ASSERT_EQ(copy.size(), 4u);
    ASSERT_EQ(expert.size(), 1u);
    const int copy_stream = std::string(name) == "monta-o3" ? kCopyStream : kIntraStream;
    const LayerWorkload w = layer_workload(s.model, s.parallel);
    for (int i = 0; i < 4; ++i) {
      EXPECT_NE(sched.op(a2a[i]).stream, sched.op(ag[i]).stream);
      EXPECT_EQ(sched.deps(ag[i]), (std::vector<OpId>{a2a[i]}));
      EXPECT_EQ(sched.deps(copy[i]), (std::vector<OpId>{ag[i]}));
      EXPECT_EQ(sched.op(copy[i]).kind, OpKind::kCopy);
      EXPECT_EQ(sched.op(copy[i]).stream, copy_stream);
      EXPECT_DOUBLE_EQ(sched.op(copy[i]).bytes, w.a2a_bytes / 4);  // MoNTA Eq. 10: I / N
    }
    EXPECT_EQ(sched.deps(expert[0]), copy);
  }
}

// FSMoE Fig. 3d: per chunk A2A (stream 1) -> ESP-AG (4) -> experts (0) -> ESP-RS (4) -> A2A.
TEST(LayerBuilder, FsmoePipelinesEveryChunkThroughTheExperts) {
  const Schedule sched = build_training_step(setup("tp=4,esp=4,ep=2", "fsmoe"));
  std::map<std::string, std::vector<OpId>> ops;
  for (OpId id : sched.ops_of(0)) {
    const Label& l = sched.label(id);
    if (l.layer == 1 && l.phase == Phase::kBackward) ops[std::string(l.name())].push_back(id);
  }
  ASSERT_EQ(ops["moe.expert"].size(), 4u);
  for (int i = 0; i < 4; ++i) {
    const OpId a2a = ops["moe.dispatch.a2a"][i], ag = ops["moe.dispatch.esp_allgather"][i],
               ex = ops["moe.expert"][i], rs = ops["moe.combine.esp_reducescatter"][i],
               back = ops["moe.combine.a2a"][i];
    EXPECT_EQ(sched.op(a2a).stream, kTokenStream);
    EXPECT_EQ(sched.op(ag).stream, kIntraStream);
    EXPECT_EQ(sched.op(ex).stream, kComputeStream);
    EXPECT_EQ(sched.deps(ag), (std::vector<OpId>{a2a}));
    EXPECT_EQ(sched.deps(ex), (std::vector<OpId>{ag}));
    EXPECT_EQ(sched.deps(rs), (std::vector<OpId>{ex}));
    EXPECT_EQ(sched.deps(back), (std::vector<OpId>{rs}));
    EXPECT_EQ(sched.label(ex).chunk, i);
  }
  // Layer 1's gradients go in layer 0's window: after its last backward dispatch A2A.
  OpId window = kNone;
  for (OpId id : sched.ops_of(0)) {
    const Label& l = sched.label(id);
    if (l.layer == 0 && l.phase == Phase::kBackward && l.name() == "moe.dispatch.a2a") window = id;
  }
  int pieces = 0;
  for (OpId id : sched.ops_of(0)) {
    const Label& l = sched.label(id);
    if (l.name() != "grad.dense.allreduce" || l.layer != 1) continue;
    ++pieces;
    EXPECT_EQ(sched.op(id).stream, kGradStream);
    const auto deps = sched.deps(id);
    EXPECT_NE(std::find(deps.begin(), deps.end(), window), deps.end());
  }
  EXPECT_EQ(pieces, 4);
}

TEST(LayerBuilder, LinaMicroOpsHaveLowPriorityAndSumToTheBucketedAllReduce) {
  const LayerSetup s = setup("ep=4", "lina");  // dp = 8, edp = 2
  const Schedule lina = build_training_step(s);
  const Schedule base = build_training_step(setup("ep=4", "baseline"));
  for (const auto* name : {"grad.dense.allreduce", "grad.expert.allreduce"}) {
    const auto micro = collectives(lina, name), bucket = collectives(base, name);
    ASSERT_FALSE(bucket.empty()) << name;
    double micro_bytes = 0, bucket_bytes = 0;
    for (const Collective* c : micro) {
      EXPECT_EQ(c->priority, -1);
      EXPECT_EQ(lina.op(c->ops[0]).priority, -1);
      EXPECT_EQ(lina.op(c->ops[0]).stream, kGradStream);
      micro_bytes += c->bytes;
    }
    for (const Collective* c : bucket) bucket_bytes += c->bytes;
    EXPECT_EQ(micro.size(), bucket.size() * 4) << name;  // a bucket per layer, 4 partitions
    EXPECT_DOUBLE_EQ(micro_bytes, bucket_bytes);
  }
  for (const Collective* c : collectives(lina, "moe.dispatch.a2a")) EXPECT_EQ(c->priority, 1);
  EXPECT_EQ(collectives(lina, "moe.dispatch.a2a").size(),
            2 * collectives(base, "moe.dispatch.a2a").size());  // 2 chunks
}

TEST(LayerBuilder, HybridEpGathersExpertsInsideDomainsAndSendsOnlyAcrossThem) {
  LayerSetup s = setup("ep=8", "expert_transfer=hybrid,hybrid_domain=2,compression=0.5");
  const Schedule sched = build_training_step(s);
  const LayerWorkload w = layer_workload(s.model, s.parallel);
  const auto a2as = collectives(sched, "moe.dispatch.a2a");
  ASSERT_EQ(a2as.size(), 4u);
  for (const Collective* c : a2as)
    for (int i = 0; i < 8; ++i) {
      EXPECT_DOUBLE_EQ(c->pair(i, i ^ 1), 0.0);  // in-domain: computed locally
      EXPECT_DOUBLE_EQ(c->pair(i, i), w.a2a_bytes * 2 / 8);
      // Cross-domain to the member of equal offset: the domain's share, (G - S) / G in all.
      EXPECT_DOUBLE_EQ(c->pair(i, (i + 2) % 8), w.a2a_bytes * 2 / 8);
      EXPECT_DOUBLE_EQ(sched.op(c->ops[i]).bytes, w.a2a_bytes * 6 / 8);
    }
  const auto gathers = collectives(sched, "moe.hybrid.expert_allgather");
  ASSERT_EQ(gathers.size(), 4u * 2);  // 4 domains x 2 layers
  for (const Collective* c : gathers) {
    EXPECT_EQ(c->group.size(), 2u);
    EXPECT_EQ(c->group[1], c->group[0] + 1);
    EXPECT_DOUBLE_EQ(c->bytes, 2 * w.expert_param_bytes * 0.5);
    EXPECT_EQ(sched.op(c->ops[0]).stream, kCopyStream);
  }
  // The experts wait for the prefetch; it was issued before the layer's attention.
  for (OpId id : sched.ops_of(0)) {
    const Label& l = sched.label(id);
    if (l.name() != "moe.expert" || l.phase != Phase::kForward) continue;
    const auto deps = sched.deps(id);
    EXPECT_TRUE(std::any_of(deps.begin(), deps.end(), [&](OpId d) {
      return sched.label(d).name() == "moe.hybrid.expert_allgather" &&
             sched.label(d).layer == l.layer;
    }));
  }
  EXPECT_EQ(collectives(sched, "moe.hybrid.grad_reducescatter").size(), 4u * 2);
  EXPECT_DOUBLE_EQ(total_flops(sched), total_flops(build_training_step(setup("ep=8", "baseline"))));
}

// SR's shared expert (HybridEP Sec. IV-B): one expert's parameters AllReduced over the EP
// group per layer in the backward, only when experts travel compressed against it; and every
// layer's AllGather is queued at the step's start (Fig. 10), not at its layer.
TEST(LayerBuilder, HybridEpSharedExpertAndSendQueue) {
  const LayerSetup s = setup("ep=8", "expert_transfer=hybrid,hybrid_domain=2,compression=0.5");
  const Schedule sched = build_training_step(s);
  const LayerWorkload w = layer_workload(s.model, s.parallel);
  const auto shared = collectives(sched, "moe.hybrid.shared_allreduce");
  ASSERT_EQ(shared.size(), 2u);  // one EP group x 2 layers
  for (const Collective* c : shared) {
    EXPECT_EQ(c->group.size(), 8u);
    EXPECT_DOUBLE_EQ(c->bytes, w.expert_param_bytes / (s.model.experts / 8.0));
    EXPECT_EQ(sched.op(c->ops[0]).stream, kCopyStream);
  }
  for (const char* off : {"shared_expert=false,compression=0.5", "compression=1"}) {
    const LayerSetup o =
        setup("ep=8", std::string("expert_transfer=hybrid,hybrid_domain=2,") + off);
    EXPECT_TRUE(collectives(build_training_step(o), "moe.hybrid.shared_allreduce").empty()) << off;
  }
  for (const Collective* c : collectives(sched, "moe.hybrid.expert_allgather")) {
    for (OpId dep : sched.deps(c->ops[0]))  // nothing of the forward's layers before it
      EXPECT_EQ(sched.label(dep).role, OpRole::kExpertTransferAllGather) << sched.label(dep).layer;
  }
}

// The expert AllGather carries SR's codec (the executors encode by it, not by the strategy):
// its compression, shared reference and feedback; every other collective travels dense in the
// model's dtype.
TEST(LayerBuilder, HybridEpAllGatherCarriesTheSrCodec) {
  const Schedule sched = build_training_step(
      setup("ep=8", "expert_transfer=hybrid,hybrid_domain=2,compression=0.02,sr_feedback=true"));
  const auto gathers = collectives(sched, "moe.hybrid.expert_allgather");
  ASSERT_EQ(gathers.size(), 8u);
  for (const Collective* c : gathers)
    EXPECT_EQ(c->codec, (WireCodec{core::Dtype::kBf16, 0.02, true, true}));
  for (CollectiveId id = 0; id < sched.num_collectives(); ++id) {
    const Collective& c = sched.collective(id);
    if (label_of(sched, &c).role == OpRole::kExpertTransferAllGather) continue;
    EXPECT_EQ(c.codec, WireCodec{core::Dtype::kBf16}) << label_of(sched, &c).name();
  }
  const Schedule plain = build_training_step(
      setup("ep=8", "expert_transfer=hybrid,hybrid_domain=2,compression=0.5,shared_expert=false"));
  for (const Collective* c : collectives(plain, "moe.hybrid.expert_allgather"))
    EXPECT_EQ(c->codec, (WireCodec{core::Dtype::kBf16, 0.5, false, false}));
  // Experts that travel uncompressed carry no SR settings, whatever the strategy says.
  const Schedule dense = build_training_step(
      setup("ep=8", "expert_transfer=hybrid,hybrid_domain=2,compression=1,sr_feedback=true"));
  for (const Collective* c : collectives(dense, "moe.hybrid.expert_allgather"))
    EXPECT_EQ(c->codec, WireCodec{core::Dtype::kBf16});
}

// The wire dtype is the model's: fp32 rows (dtype_bytes 4) on the token A2As and the rest.
TEST(LayerBuilder, CollectivesCarryTheModelsWireDtype) {
  LayerSetup s = setup("ep=8", "baseline");
  s.model.dtype_bytes = 4;
  const Schedule sched = build_training_step(s);
  ASSERT_GT(sched.num_collectives(), 0);
  for (CollectiveId id = 0; id < sched.num_collectives(); ++id)
    EXPECT_EQ(sched.collective(id).codec.dtype, core::Dtype::kFp32);
  EXPECT_EQ(collectives(build_training_step(setup("ep=8", "baseline")), "moe.dispatch.a2a")
                .front()
                ->codec.dtype,
            core::Dtype::kBf16);
}

// a2a_dtype sets the token rows' dtype per direction of travel, with exact bytes: h = 256
// fp32 rows of 1024 bytes travel as 256 + 2 x 4 = 264 (fp8, one fp32 scale per 128 values) or
// 512 (bf16). 2 x 32 tokens x top-2 = 128 rows per rank, 16 to each of 8 EP members. The
// backward's first A2A (the combine's gradient, labelled dispatch) goes toward the experts.
TEST(LayerBuilder, A2ADtypeSetsTheTokenRowsWireBytesPerDirection) {
  LayerSetup s = setup("ep=8", "base=baseline,a2a_dtype=fp8/bf16,chunks=2");
  s.model.hidden = 256;
  s.model.dtype_bytes = 4;
  const Schedule sched = build_training_step(s);
  for (const auto& [name, dtype, row] :
       {std::tuple{"moe.dispatch.a2a", core::Dtype::kFp8, 264.0},
        std::tuple{"moe.combine.a2a", core::Dtype::kBf16, 512.0}}) {
    const auto cs = collectives(sched, name);
    ASSERT_EQ(cs.size(), 2u * 2 * 2) << name;  // layers x phases x chunks
    for (const Collective* c : cs) {
      EXPECT_EQ(c->codec.dtype, dtype) << name;
      for (int i = 0; i < 8; ++i)
        for (int j = 0; j < 8; ++j) EXPECT_EQ(c->pair(i, j), 16 * row / 2) << name;
    }
  }
  // Everything else keeps the model's dtype (fp32) and bytes.
  for (CollectiveId id = 0; id < sched.num_collectives(); ++id) {
    const OpRole role = sched.labels()[sched.collective(id).label].role;
    if (role != OpRole::kDispatchA2A && role != OpRole::kCombineA2A) {
      EXPECT_EQ(sched.collective(id).codec.dtype, core::Dtype::kFp32);
    }
  }
  const LayerWorkload w = layer_workload(s.model, s.parallel);
  for (const Collective* c : collectives(sched, "grad.dense.allreduce"))
    EXPECT_EQ(c->bytes, w.dense_grad_bytes);
  // Without the knob: the model's dtype and the workload's bytes, as before.
  s.strategy.a2a_dtype.reset();
  const Schedule plain = build_training_step(s);
  for (const Collective* c : collectives(plain, "moe.dispatch.a2a")) {
    EXPECT_EQ(c->codec.dtype, core::Dtype::kFp32);
    EXPECT_EQ(c->pair(0, 1), 16 * 1024.0 / 2);
  }
}

// The ESP AllGather and the TP AllGather move the rows of the A2A they extend (dispatch,
// combine) and take its dtype; the ESP ReduceScatter sums partial outputs in the model's.
TEST(LayerBuilder, A2ADtypeCoversTheGathersThatExtendTheA2As) {
  LayerSetup s = setup("tp=4,esp=4,ep=2", "base=monta-o1,a2a_dtype=fp8/bf16");
  s.model.hidden = 256;
  s.model.dtype_bytes = 4;
  const LayerWorkload w = layer_workload(s.model, s.parallel);
  const Schedule sched = build_training_step(s);
  const double fp8 = 264.0 / 1024, bf16 = 0.5;
  for (const Collective* c : collectives(sched, "moe.dispatch.a2a"))
    EXPECT_EQ(row_sum(*c, 0), w.a2a_bytes / 4 * fp8);  // the TP drop's quarter
  for (const auto& [name, dtype, bytes] :
       {std::tuple{"moe.dispatch.esp_allgather", core::Dtype::kFp8, w.a2a_bytes * fp8},
        std::tuple{"moe.combine.tp_allgather", core::Dtype::kBf16, w.a2a_bytes * bf16},
        std::tuple{"moe.combine.esp_reducescatter", core::Dtype::kFp32, w.a2a_bytes}}) {
    const auto cs = collectives(sched, name);
    ASSERT_EQ(cs.size(), 2u * 2 * 2) << name;
    for (const Collective* c : cs) {
      EXPECT_EQ(c->codec.dtype, dtype) << name;
      EXPECT_EQ(c->bytes, bytes) << name;
    }
  }
}

// Context parallelism (MoNTA Fig. 11): per layer, the forward AllGathers the sequence's K and
// V over each CP group before its attention, the backward reduce-scatters their gradients.
TEST(LayerBuilder, ContextParallelGathersKeysAndValuesOverTheCpGroup) {
  const LayerSetup s = setup("cp=2,tp=2,ep=4,esp=2", "baseline");
  const Schedule sched = build_training_step(s);
  const LayerWorkload w = layer_workload(s.model, s.parallel);
  // t = b s / cp = 32 tokens; K and V of 64 tokens for h / tp = 32 columns of 2 bytes.
  EXPECT_DOUBLE_EQ(w.cp_kv_bytes, 2.0 * 2 * 32 * 64 / 2 * 2);
  const auto gathers = collectives(sched, "attn.cp.allgather");
  const auto scatters = collectives(sched, "attn.cp.reducescatter");
  ASSERT_EQ(gathers.size(), 4u * 2);  // 4 CP groups x 2 layers
  ASSERT_EQ(scatters.size(), 4u * 2);
  const auto cp_groups = core::build_rank_groups(s.parallel).cp;
  for (const Collective* c : gathers) {
    EXPECT_DOUBLE_EQ(c->bytes, w.cp_kv_bytes);
    EXPECT_EQ(label_of(sched, c).phase, Phase::kForward);
    EXPECT_NE(std::find(cp_groups.begin(), cp_groups.end(), c->group), cp_groups.end());
  }
  for (OpId id : sched.ops_of(0)) {  // the forward attention waits for its keys and values
    const Label& l = sched.label(id);
    if (l.name() != "attn" || l.phase != Phase::kForward) continue;
    std::vector<OpId> before = sched.deps(id);
    before.push_back(sched.op(id).prev);
    EXPECT_TRUE(std::any_of(before.begin(), before.end(), [&](OpId d) {
      return d != kNone && sched.label(d).name() == "attn.cp.allgather";
    })) << l.layer;
  }
  for (const Collective* c : scatters) EXPECT_EQ(label_of(sched, c).phase, Phase::kBackward);
  EXPECT_TRUE(
      collectives(build_training_step(setup("tp=2,ep=4,esp=2", "baseline")), "attn.cp.allgather")
          .empty());
}

// MoNTA "Communication priority": EP > PP > CP > DP where they share links; without it all
// share fairly, except Lina's A2A-first.
TEST(LayerBuilder, MontaCommPriorityOrdersEpPpCpDp) {
  const auto priorities = [](const std::string& strategy) {
    const Schedule s = build_training_step(setup("cp=2,pp=2,ep=2", strategy));
    std::map<std::string, std::set<int>> by_name;
    for (OpId id = 0; id < s.num_ops(); ++id)
      by_name[std::string(s.label(id).name())].insert(s.op(id).priority);
    return by_name;
  };
  auto monta = priorities("comm_priority=monta");
  EXPECT_EQ(monta["moe.dispatch.a2a"], std::set<int>{3});
  EXPECT_EQ(monta["moe.combine.a2a"], std::set<int>{3});
  EXPECT_EQ(monta["pp.send.activations"], std::set<int>{2});
  EXPECT_EQ(monta["pp.recv.grads"], std::set<int>{2});
  EXPECT_EQ(monta["attn.cp.allgather"], std::set<int>{1});
  EXPECT_EQ(monta["grad.dense.allreduce"], std::set<int>{0});
  for (const auto& [name, set] : priorities("baseline")) EXPECT_EQ(set, std::set<int>{0}) << name;
  auto lina = priorities("base=lina,comm_priority=monta");
  EXPECT_EQ(lina["moe.dispatch.a2a"], std::set<int>{3});
  EXPECT_EQ(lina["grad.dense.allreduce"], std::set<int>{kLinaGradPriority});
  EXPECT_EQ(named_strategy("monta-o2").comm_priority, CommPriority::kMonta);
}

TEST(LayerBuilder, ScheduleComputesInTheModelsComputeDtype) {
  LayerSetup s = setup("ep=8", "baseline");
  EXPECT_EQ(build_training_step(s).compute_dtype(), core::Dtype::kBf16);  // 2-byte default
  s.model.dtype_bytes = 4;
  EXPECT_EQ(build_training_step(s).compute_dtype(), core::Dtype::kFp32);
  s.model.compute_dtype = core::Dtype::kTf32;
  EXPECT_EQ(build_training_step(s).compute_dtype(), core::Dtype::kTf32);
}

// Nothing travels, nothing is paid: with a domain of one member no expert is sent, so SR
// compression needs no shared expert and builds the very schedule of no compression.
TEST(LayerBuilder, HybridEpCompressionWithADomainOfOneCostsWhatNoCompressionCosts) {
  const Schedule compressed =
      build_training_step(setup("ep=8", "expert_transfer=hybrid,hybrid_domain=1,compression=0.02"));
  const Schedule plain =
      build_training_step(setup("ep=8", "expert_transfer=hybrid,hybrid_domain=1,compression=1"));
  EXPECT_TRUE(collectives(compressed, "moe.hybrid.shared_allreduce").empty());
  ASSERT_EQ(compressed.num_ops(), plain.num_ops());
  for (OpId id = 0; id < compressed.num_ops(); ++id) {
    EXPECT_EQ(compressed.label(id).role, plain.label(id).role) << id;
    EXPECT_DOUBLE_EQ(compressed.op(id).bytes, plain.op(id).bytes) << id;
    EXPECT_DOUBLE_EQ(compressed.op(id).flops, plain.op(id).flops) << id;
  }
  Strategy s = parse_strategy("expert_transfer=hybrid,hybrid_domain=1,compression=0.02", "-");
  EXPECT_DOUBLE_EQ(effective_compression(s), 1.0);
  s.hybrid_domain = 2;
  EXPECT_DOUBLE_EQ(effective_compression(s), 0.02);
  s.expert_transfer = ExpertTransfer::kNone;
  EXPECT_DOUBLE_EQ(effective_compression(s), 1.0);
}

// HybridEP's per-level domains by location renumbering (Sec. IV-A): on 2 nodes x 4 GPUs,
// sizes 2x1 pair each GPU with the GPU of equal index on the other node (experts cross the
// nodes) and keep the tokens inside the node (A2A between equal offsets).
TEST(LayerBuilder, HybridEpPerLevelDomainsAreSubGrids) {
  const core::Topology topo(testing::tiny_cluster());
  const core::RankGroup ep = {0, 1, 2, 3, 4, 5, 6, 7};
  EXPECT_EQ(hybrid_member_order(topo, ep, {2, 1}, "-"), (std::vector<int>{0, 4, 1, 5, 2, 6, 3, 7}));
  EXPECT_EQ(hybrid_member_order(topo, ep, {1, 2}, "-"), (std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(hybrid_member_order(topo, ep, {2, 2}, "-"), (std::vector<int>{0, 1, 4, 5, 2, 3, 6, 7}));
  EXPECT_EQ(hybrid_member_order(topo, ep, {}, "-"), (std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_ERROR_HAS(hybrid_member_order(topo, ep, {2}, "-"), "one size per level");
  EXPECT_ERROR_HAS(hybrid_member_order(topo, ep, {2, 3}, "-"), "does not divide");

  const LayerSetup s = setup("ep=8", "expert_transfer=hybrid,hybrid_levels=2x1");
  EXPECT_EQ(s.strategy.hybrid_domain, 2);
  const Schedule sched = build_training_step(s);
  for (const Collective* c : collectives(sched, "moe.hybrid.expert_allgather")) {
    ASSERT_EQ(c->group.size(), 2u);
    EXPECT_EQ(c->group[1], c->group[0] + 4);  // the same GPU of the other node
  }
  for (const Collective* c : collectives(sched, "moe.dispatch.a2a"))
    for (int i = 0; i < 8; ++i)
      for (int j = 0; j < 8; ++j)
        if (i / 4 != j / 4) {
          EXPECT_DOUBLE_EQ(c->pair(i, j), 0.0) << i << " -> " << j;
        }
  LayerSetup flat = s;
  flat.cluster.levels.clear();
  EXPECT_ERROR_HAS(build_training_step(flat), "hybrid_levels");
}

TEST(LayerBuilder, NetMoeUsesTheGivenMatrices) {
  LayerSetup s = setup("ep=4", "netmoe");
  s.a2a_pair_bytes = skewed_pairs(s);
  const Schedule sched = build_training_step(s);
  const auto ep = core::build_rank_groups(s.parallel).ep;
  for (const Collective* c : collectives(sched, "moe.dispatch.a2a")) {
    const size_t k = std::find(ep.begin(), ep.end(), c->group) - ep.begin();
    ASSERT_LT(k, ep.size());
    EXPECT_EQ(c->pair_bytes, s.a2a_pair_bytes[k]);
  }
  for (const Collective* c : collectives(sched, "moe.combine.a2a"))
    for (int i = 0; i < 4; ++i)
      for (int j = 0; j < 4; ++j) EXPECT_DOUBLE_EQ(c->pair(i, j), (i + j + 1) * 100.0);
  // Experts compute what they receive: column j sums to 100 (4 j + 10).
  const LayerWorkload w = layer_workload(s.model, s.parallel);
  for (OpId id : sched.ops_of(3)) {
    if (sched.label(id).name() == "moe.expert" && sched.label(id).phase == Phase::kForward) {
      EXPECT_DOUBLE_EQ(sched.op(id).flops, w.expert_flops * (100.0 * 22) / w.a2a_bytes);
    }
  }
}

// NetMoE's gather goes to the samples' new positions: forward the given combine matrices,
// backward their transposes first (dy from the new positions), then the dispatch's.
TEST(LayerBuilder, NetMoeCombineMatricesGoToTheNewPositions) {
  LayerSetup s = setup("ep=4", "netmoe");
  s.a2a_pair_bytes = skewed_pairs(s);
  s.a2a_combine_pair_bytes = skewed_pairs(s);
  for (auto& m : s.a2a_combine_pair_bytes) m[1] += 7;  // member 0 -> 1: not symmetric
  const Schedule sched = build_training_step(s);
  int forward = 0, backward = 0;
  for (const char* name : {"moe.dispatch.a2a", "moe.combine.a2a"})
    for (const Collective* c : collectives(sched, name)) {
      const Label& l = sched.labels()[c->label];
      const bool fwd = l.phase == Phase::kForward, combine = l.name() == "moe.combine.a2a";
      const double want = fwd == combine ? 207.0 : 200.0;  // forward combine, backward dispatch
      EXPECT_DOUBLE_EQ(fwd ? c->pair(0, 1) : c->pair(1, 0), want) << l.name() << " " << fwd;
      (fwd ? forward : backward) += 1;
    }
  EXPECT_EQ(forward, backward);
  s.a2a_pair_bytes.clear();
  EXPECT_ERROR_HAS(build_training_step(s), "a2a_pair_bytes");
}

// NetMoE Alg. 1 line 9: after each forward gate the EP group all-gathers its samples' ids and
// expert counts (B (1 + E) int32 each) and its aux sums per home rank (P (1 + 2E) doubles
// each); the solve runs on the placement stream after the counts, and the first gather chunk
// waits for it. With the LM head the targets (B S int32 each) are all-gathered at the start
// and the head waits for them.
TEST(LayerBuilder, NetMoeGathersCountsAndSolvesBesideTheScatter) {
  LayerSetup s = setup("ep=4", "base=netmoe,chunks=2");
  s.a2a_pair_bytes = skewed_pairs(s);
  s.lm_head = true;
  s.model.vocab_size = 64;
  const Schedule sched = build_training_step(s);
  const double b = 2, e = 8, p = 4, seq = 32;
  const auto counts = collectives(sched, "moe.netmoe.counts_allgather");
  const auto aux = collectives(sched, "moe.netmoe.aux_allgather");
  const auto targets = collectives(sched, "moe.netmoe.targets_allgather");
  ASSERT_EQ(counts.size(), 2u * 2);  // 2 EP groups x 2 layers, forward only
  ASSERT_EQ(aux.size(), 2u * 2);
  ASSERT_EQ(targets.size(), 2u);
  for (const Collective* c : counts) EXPECT_DOUBLE_EQ(c->bytes, p * b * (1 + e) * 4);
  for (const Collective* c : aux) EXPECT_DOUBLE_EQ(c->bytes, p * p * (1 + 2 * e) * 8);
  for (const Collective* c : targets) EXPECT_DOUBLE_EQ(c->bytes, p * b * seq * 4);
  for (int layer = 0; layer < 2; ++layer) {
    OpId solve = kNone, gathered = kNone, first_gather = kNone, head = kNone, moved = kNone;
    for (OpId id : sched.ops_of(3)) {
      const Label& l = sched.label(id);
      if (l.layer != layer && l.name() != "head") continue;
      if (l.name() == "moe.netmoe.solve") solve = id;
      if (l.name() == "moe.netmoe.counts_allgather") gathered = id;
      if (l.name() == "moe.netmoe.targets_allgather") moved = id;
      if (l.name() == "moe.combine.a2a" && l.phase == Phase::kForward && l.chunk == 0)
        first_gather = id;
      if (l.name() == "head" && l.phase == Phase::kForward) head = id;
    }
    ASSERT_NE(solve, kNone);
    EXPECT_EQ(sched.op(solve).stream, kPlacementStream);
    const auto has = [&](OpId op, OpId dep) {
      const auto d = sched.deps(op);
      return std::find(d.begin(), d.end(), dep) != d.end();
    };
    EXPECT_TRUE(has(solve, gathered));
    EXPECT_TRUE(has(first_gather, solve));
    if (layer == 1) {  // the targets' AllGather is labelled with the stage's last block
      EXPECT_TRUE(has(head, moved));
    }
  }
}

TEST(LayerBuilder, ComputeIsTheSameUnderCommunicationKnobs) {
  const double base = total_flops(build_training_step(setup("tp=4,esp=4,ep=2", "baseline")));
  for (const char* name : {"hier-a2a", "monta-o1", "monta-o2", "monta-o3", "lina", "fsmoe",
                           "hybridep", "chunks=3,pipeline_experts=false"})
    EXPECT_DOUBLE_EQ(total_flops(build_training_step(setup("tp=4,esp=4,ep=2", name))), base)
        << name;
}

// recompute_experts changes one thing in the step: every backward expert op carries its
// forward's flops once more (3x the forward instead of 2x), under every layout and method.
TEST(LayerBuilder, RecomputeExpertsAddsTheForwardToEveryBackwardExpertOp) {
  for (const char* parallel : kConfigs)
    for (const auto& name : strategy_names()) {
      const std::string what = std::string(parallel) + " " + name;
      LayerSetup off = setup(parallel, name);
      LayerSetup on = setup(parallel, "base=" + name + ",recompute_experts=true");
      if (name == "netmoe") off.a2a_pair_bytes = on.a2a_pair_bytes = skewed_pairs(off);
      const Schedule a = build_training_step(off), b = build_training_step(on);
      ASSERT_EQ(a.num_ops(), b.num_ops()) << what;
      std::map<std::tuple<int, int, int>, double> forward;  // (rank, layer, chunk): flops
      for (OpId id = 0; id < a.num_ops(); ++id)
        if (a.label(id).role == OpRole::kExpert && a.label(id).phase == Phase::kForward)
          forward[{a.op(id).rank, a.label(id).layer, a.label(id).chunk}] = a.op(id).flops;
      double added = 0;
      int recomputed = 0;
      for (OpId id = 0; id < a.num_ops(); ++id) {
        const Label& l = a.label(id);
        ASSERT_EQ(l, b.label(id)) << what;
        EXPECT_EQ(a.op(id).bytes, b.op(id).bytes) << what;
        if (l.role != OpRole::kExpert || l.phase != Phase::kBackward) {
          EXPECT_EQ(a.op(id).flops, b.op(id).flops) << what << " " << to_string(l);
          continue;
        }
        EXPECT_EQ(b.op(id).flops, a.op(id).flops / 2 * 3) << what << " " << to_string(l);
        // The same chunks in both phases: the forward op of the same rows is what is added.
        const auto fwd = forward.find({a.op(id).rank, l.layer, l.chunk});
        if (fwd != forward.end() && off.strategy.chunks_fwd == off.strategy.chunks_bwd) {
          EXPECT_EQ(b.op(id).flops, a.op(id).flops + fwd->second) << what << " " << to_string(l);
        }
        added += b.op(id).flops - a.op(id).flops;
        ++recomputed;
      }
      EXPECT_GT(recomputed, 0) << what;
      EXPECT_DOUBLE_EQ(total_flops(b) - total_flops(a), added) << what;
    }
}

TEST(LayerBuilder, AttentionAllReducesOverTp) {
  const LayerSetup s = setup("tp=2,esp=2,ep=4", "baseline");
  const Schedule sched = build_training_step(s);
  const auto ar = collectives(sched, "attn.tp.allreduce");
  EXPECT_EQ(ar.size(), 4u * 2 * 2);  // 4 TP groups x 2 layers x 2 phases
  for (const Collective* c : ar)
    EXPECT_DOUBLE_EQ(c->bytes, layer_workload(s.model, s.parallel).activation_bytes);
}

TEST(LayerBuilder, PipelineStagesHandOffActivations) {
  const Schedule sched = build_training_step(setup("tp=2,esp=2,ep=2,pp=2", "baseline"));
  const Totals t = sched.totals();
  EXPECT_EQ(t[size_t(OpKind::kSend)].ops, 2 * 4);  // 4 stage pairs, forward and backward
  EXPECT_EQ(t[size_t(OpKind::kRecv)].ops, 2 * 4);
}

TEST(LayerBuilder, BadSetupsAreErrors) {
  EXPECT_ERROR_HAS(build_training_step(setup("ep=8", "netmoe")), "a2a_pair_bytes",
                   "one matrix per EP group");
  LayerSetup s = setup("ep=4", "netmoe");
  s.a2a_pair_bytes = skewed_pairs(s);
  s.a2a_pair_bytes[1].pop_back();
  EXPECT_ERROR_HAS(build_training_step(s), "a2a_pair_bytes[1]", "needs 16 entries, got 15");
  s.a2a_pair_bytes = skewed_pairs(s);
  s.a2a_pair_bytes[0][3] = -1;
  EXPECT_ERROR_HAS(build_training_step(s), "a2a_pair_bytes[0]", ">= 0");
  EXPECT_ERROR_HAS(build_training_step(setup("tp=2,esp=1,ep=8", "monta-o1")), "tp_dispatch",
                   "tp = esp", "tp=2, esp=1");
  EXPECT_ERROR_HAS(build_training_step(setup("tp=2,esp=4,ep=2", "baseline")), "parallel: esp",
                   "tp=2, esp=4");
  EXPECT_ERROR_HAS(build_training_step(setup("ep=8", "expert_transfer=hybrid,hybrid_domain=3")),
                   "hybrid_domain", "divide the EP size 8");
  LayerSetup wrong = setup("ep=8", "baseline");
  wrong.cluster.levels[0].count = 4;
  EXPECT_ERROR_HAS(build_training_step(wrong), "cluster", "16 devices", "need 8");
  wrong = setup("ep=8", "baseline", 0);
  EXPECT_ERROR_HAS(build_training_step(wrong), "layers", "got 0");
  wrong = setup("ep=8", "baseline");
  wrong.strategy.copy_pipelining = true;
  EXPECT_ERROR_HAS(build_training_step(wrong), "strategy: copy_pipelining");
}

}  // namespace
}  // namespace moecomm::sched

namespace moecomm::sched {
namespace {

// A whole model's step (lm_head): one "head" compute op per phase on every last pipeline
// stage, between the last block's forward and its backward, priced 2 t h V and 4 t h V.
TEST(LayerBuilder, LmHeadAddsTheHeadBetweenTheForwardAndTheBackward) {
  LayerSetup s = setup("ep=4,pp=2", "baseline");
  s.model.vocab_size = 100;
  s.lm_head = true;
  const Schedule sched = build_training_step(s);
  const core::RankGroups groups = core::build_rank_groups(s.parallel);
  const double t = double(s.model.micro_batch) * s.model.seq_len;
  std::set<int> last;
  for (const auto& pp : groups.pp) last.insert(pp.back());
  for (int r = 0; r < sched.world_size(); ++r) {
    std::vector<OpId> heads;
    for (OpId id : sched.ops_of(r))
      if (sched.label(id).name() == "head") heads.push_back(id);
    if (!last.count(r)) {
      EXPECT_TRUE(heads.empty()) << "rank " << r;
      continue;
    }
    ASSERT_EQ(heads.size(), 2u) << "rank " << r;
    EXPECT_EQ(sched.label(heads[0]).phase, Phase::kForward);
    EXPECT_EQ(sched.op(heads[0]).flops, 2 * t * 64 * 100);
    EXPECT_EQ(sched.label(heads[1]).phase, Phase::kBackward);
    EXPECT_EQ(sched.op(heads[1]).flops, 4 * t * 64 * 100);
    // The backward's first op on the compute stream comes after the head's backward.
    const std::vector<OpId> compute = sched.stream_ops(r, kComputeStream);
    const auto at = std::find(compute.begin(), compute.end(), heads[1]);
    ASSERT_NE(at, compute.end());
    ASSERT_NE(at + 1, compute.end());
    EXPECT_EQ(sched.label(*(at + 1)).phase, Phase::kBackward);
    EXPECT_EQ(sched.label(*(at - 1)).phase, Phase::kForward);
  }
  s.model.vocab_size = 0;
  EXPECT_ERROR_HAS(build_training_step(s), "lm_head", "vocab_size");
}

}  // namespace
}  // namespace moecomm::sched

namespace moecomm::sched {
namespace {

// The op guard prices a step before building it: its count must bound every strategy's real
// one (each knob's ops at their most: cp, tp, esp and ep > 1, chunks with copies, NetMoE with
// the head, HybridEP's SR, partitions), or a step past the memory limit would get built.
TEST(LayerBuilder, TheOpBoundHoldsForEveryKnob) {
  const char* strategies[] = {
      "baseline",
      "base=monta-o3,chunks_fwd=3,chunks_bwd=5",
      "base=monta-o2,chunks=4,a2a=2dh",
      "base=fsmoe,chunks_fwd=2,chunks_bwd=3,grad_partitions=5",
      "base=lina,chunks=3,grad_partitions=7",
      "base=hybridep,hybrid_domain=2,compression=0.1",
      "base=netmoe,chunks=2,grad_sync=lina,grad_partitions=3",
      "base=netmoe,tp_dispatch=drop-allgather,chunks=3,pipeline_experts=false"};
  const char* configs[] = {"ep=8",          "tp=2,esp=2,ep=4", "tp=2,esp=2,ep=2,pp=2",
                           "esp=2,ep=4",    "tp=2,cp=2,ep=2",  "tp=2,cp=2,esp=2,ep=2",
                           "cp=2,ep=4,pp=2"};
  int built = 0;
  for (const char* parallel : configs)
    for (const char* strategy : strategies)
      for (int layers : {1, 3}) {
        LayerSetup s = setup(parallel, strategy, layers);
        s.model.vocab_size = 100;
        s.lm_head = true;
        if (s.strategy.placement == Placement::kNetMoe) s.a2a_pair_bytes = skewed_pairs(s);
        Schedule sched(1);
        try {
          sched = build_training_step(s);
        } catch (const Error&) {
          continue;  // knobs this layout cannot run
        }
        ++built;
        EXPECT_LE(sched.num_ops(), step_ops_bound(s)) << parallel << " " << strategy;
        // An upper bound, not a guess: within a small factor of the real count.
        EXPECT_GT(sched.num_ops() * 4.0, step_ops_bound(s)) << parallel << " " << strategy;
      }
  EXPECT_GT(built, 60);
}

}  // namespace
}  // namespace moecomm::sched
