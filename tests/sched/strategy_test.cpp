#include "sched/strategy.h"

#include <gtest/gtest.h>

#include <set>

#include "support/expect_error.h"

namespace moecomm::sched {
namespace {

TEST(Strategy, EveryNameBuildsItsPaperSetting) {
  const auto names = strategy_names();
  ASSERT_EQ(names.size(), 9u);
  for (const auto& n : names) {
    EXPECT_EQ(named_strategy(n).name, n);
    EXPECT_NO_THROW(validate(named_strategy(n), n));
  }
  EXPECT_EQ(named_strategy("baseline"), Strategy{});
  EXPECT_EQ(named_strategy("hier-a2a").a2a, Algorithm::k2DH);
  const Strategy o1 = named_strategy("monta-o1"), o2 = named_strategy("monta-o2"),
                 o3 = named_strategy("monta-o3");
  EXPECT_EQ(o1.tp_dispatch, TpDispatch::kDropAllGather);
  EXPECT_EQ(o1.chunks_fwd, 1);
  EXPECT_EQ(o2.chunks_fwd, 4);
  EXPECT_FALSE(o2.pipeline_experts);
  EXPECT_FALSE(o2.copy_pipelining);
  EXPECT_TRUE(o3.copy_pipelining);
  const Strategy fs = named_strategy("fsmoe");
  EXPECT_EQ(fs.grad_sync, GradSync::kFsmoe);
  EXPECT_EQ(fs.a2a, Algorithm::k2DH);
  EXPECT_EQ(fs.chunks_bwd, 4);
  EXPECT_EQ(named_strategy("lina").grad_sync, GradSync::kLina);
  EXPECT_EQ(named_strategy("lina").chunks_fwd, 2);
  EXPECT_EQ(named_strategy("hybridep").expert_transfer, ExpertTransfer::kHybrid);
  EXPECT_EQ(named_strategy("netmoe").placement, Placement::kNetMoe);
}

TEST(Strategy, ParsesNamesAndKnobs) {
  EXPECT_EQ(parse_strategy("monta-o2", "-"), named_strategy("monta-o2"));
  Strategy s = parse_strategy("base=fsmoe,chunks_bwd=8,grad_partitions=3", "-");
  EXPECT_EQ(s.name, "fsmoe-custom");
  EXPECT_EQ(s.chunks_fwd, 4);
  EXPECT_EQ(s.chunks_bwd, 8);
  EXPECT_EQ(s.grad_partitions, 3);
  EXPECT_EQ(s.grad_sync, GradSync::kFsmoe);
  s = parse_strategy(
      "placement=netmoe,a2a=1dh,expert_transfer=hybrid,hybrid_domain=4,"
      "compression=0.25,shared_expert=false,sr_feedback=true,chunks=3,name=mix,"
      "comm_priority=monta",
      "-");
  EXPECT_EQ(s.name, "mix");
  EXPECT_EQ(s.comm_priority, CommPriority::kMonta);
  EXPECT_EQ(parse_strategy(to_string(s), "-"), s);
  EXPECT_ERROR_HAS(parse_strategy("comm_priority=ep", "-"), "comm_priority", "none, monta");
  EXPECT_EQ(s.placement, Placement::kNetMoe);
  EXPECT_EQ(s.a2a, Algorithm::k1DH);
  EXPECT_EQ(s.hybrid_domain, 4);
  EXPECT_DOUBLE_EQ(s.compression, 0.25);
  EXPECT_FALSE(s.shared_expert);
  EXPECT_TRUE(named_strategy("hybridep").shared_expert);
  EXPECT_TRUE(s.sr_feedback);
  EXPECT_FALSE(named_strategy("hybridep").sr_feedback);  // the paper's SR by default
  EXPECT_EQ(s.chunks_fwd, 3);
  EXPECT_EQ(s.chunks_bwd, 3);
  EXPECT_EQ(parse_strategy("base=lina", "-").name, "lina");
  EXPECT_EQ(parse_strategy("grad_sync=lina", "-").name, "custom");
}

// Activation recomputation of the experts is a memory knob no paper method turns on.
TEST(Strategy, RecomputeExpertsIsOffByDefaultAndRoundTrips) {
  EXPECT_FALSE(Strategy{}.recompute_experts);
  for (const auto& n : strategy_names()) {
    EXPECT_FALSE(named_strategy(n).recompute_experts) << n;
    EXPECT_FALSE(parse_strategy(n, "-").recompute_experts) << n;
  }
  EXPECT_NE(to_string(Strategy{}).find(",recompute_experts=false"), std::string::npos);
  for (const auto& n : strategy_names()) {
    const Strategy s = parse_strategy("base=" + n + ",recompute_experts=true", "-");
    EXPECT_TRUE(s.recompute_experts) << n;
    Strategy expected = named_strategy(n);
    expected.name = n + "-custom";
    expected.recompute_experts = true;
    EXPECT_EQ(s, expected) << n;  // the one knob set, the method's others kept
    EXPECT_NE(to_string(s).find(",recompute_experts=true"), std::string::npos) << to_string(s);
    EXPECT_EQ(parse_strategy(to_string(s), "-"), s) << to_string(s);
  }
  EXPECT_FALSE(parse_strategy("recompute_experts=false", "-").recompute_experts);
  const ParsedStrategy parsed = parse_strategy_knobs("base=lina,recompute_experts=true", "-");
  EXPECT_EQ(parsed.explicit_knobs, (std::set<std::string>{"recompute_experts"}));

  using moecomm::testing::error_of;
  EXPECT_EQ(error_of([] { parse_strategy("recompute_experts=yes", "--strategy"); }),
            "--strategy: recompute_experts: unknown value \"yes\" (accepted: true, false)");
  EXPECT_EQ(error_of([] { parse_strategy("recompute_experts=ture", "--strategy"); }),
            "--strategy: recompute_experts: unknown value \"ture\"; did you mean 'true'? "
            "(accepted: true, false)");
  EXPECT_EQ(error_of([] { parse_strategy("recompute_experts=", "--strategy"); }),
            "--strategy: recompute_experts: unknown value \"\" (accepted: true, false)");
  EXPECT_ERROR_HAS(parse_strategy("recompute_experts=true,recompute_experts=false", "-"),
                   "recompute_experts: given twice");
  EXPECT_ERROR_HAS(parse_strategy("recompute_expert=true", "--strategy"),
                   "--strategy: recompute_expert: unknown knob; did you mean 'recompute_experts'?");
}

TEST(Strategy, ToStringRoundTrips) {
  for (const auto& n : strategy_names()) {
    const Strategy s = named_strategy(n);
    EXPECT_EQ(parse_strategy(to_string(s), "-"), s) << to_string(s);
  }
  Strategy s = parse_strategy(
      "compression=0.3,hybrid_domain=4,expert_transfer=hybrid,shared_expert=false,"
      "sr_feedback=true",
      "-");
  EXPECT_EQ(parse_strategy(to_string(s), "-"), s);
  s = parse_strategy("expert_transfer=hybrid,hybrid_levels=2x1x4", "-");
  EXPECT_EQ(s.hybrid_levels, (std::vector<int>{2, 1, 4}));
  EXPECT_EQ(s.hybrid_domain, 8);
  EXPECT_EQ(parse_strategy(to_string(s), "-"), s);
}

// a2a_dtype: absent by default (the model's dtype) and then left out of the strategy string;
// one dtype sets both directions, DISPATCH/COMBINE each; it round-trips as written.
TEST(Strategy, A2ADtypeParsesPerDirectionAndRoundTrips) {
  EXPECT_FALSE(named_strategy("baseline").a2a_dtype.has_value());
  EXPECT_EQ(to_string(named_strategy("baseline")).find("a2a_dtype"), std::string::npos);
  const Strategy both = parse_strategy("base=lina,a2a_dtype=bf16", "-");
  EXPECT_EQ(both.a2a_dtype, (A2ADtype{core::Dtype::kBf16, core::Dtype::kBf16}));
  EXPECT_NE(to_string(both).find(",a2a_dtype=bf16"), std::string::npos);
  EXPECT_EQ(parse_strategy(to_string(both), "-"), both);
  const Strategy deepep = parse_strategy("a2a_dtype=fp8/bf16", "-");
  EXPECT_EQ(deepep.a2a_dtype, (A2ADtype{core::Dtype::kFp8, core::Dtype::kBf16}));
  EXPECT_NE(to_string(deepep).find(",a2a_dtype=fp8/bf16"), std::string::npos);
  EXPECT_EQ(parse_strategy(to_string(deepep), "-"), deepep);
  EXPECT_EQ(parse_strategy("a2a_dtype=fp32", "-").a2a_dtype,
            (A2ADtype{core::Dtype::kFp32, core::Dtype::kFp32}));
  EXPECT_EQ(parse_strategy_knobs("a2a_dtype=fp8", "-").explicit_knobs,
            (std::set<std::string>{"a2a_dtype"}));
  EXPECT_EQ(a2a_dtype_names(), (std::vector<std::string>{"fp32", "bf16", "fp8"}));
}

TEST(Strategy, A2ADtypeErrorsNameTheKnobAndTheValues) {
  using moecomm::testing::error_of;
  EXPECT_EQ(error_of([] { parse_strategy("a2a_dtype=fp16", "--strategy"); }),
            "--strategy: a2a_dtype: unknown wire dtype \"fp16\" (accepted: fp32, bf16, fp8, or "
            "DISPATCH/COMBINE such as fp8/bf16)");
  EXPECT_ERROR_HAS(parse_strategy("a2a_dtype=fp8/int8", "-"), "a2a_dtype", "\"int8\"");
  EXPECT_ERROR_HAS(parse_strategy("a2a_dtype=fp8/bf16/fp32", "-"), "a2a_dtype", "DISPATCH/COMBINE");
  EXPECT_ERROR_HAS(parse_strategy("a2a_dtype=", "-"), "a2a_dtype", "unknown wire dtype");
  EXPECT_ERROR_HAS(parse_strategy("a2a_dtype=bf16,a2a_dtype=fp8", "-"), "a2a_dtype: given twice");
  // A Strategy built in code is checked alike.
  Strategy s;
  s.a2a_dtype = A2ADtype{core::Dtype::kFp16, core::Dtype::kBf16};
  EXPECT_EQ(error_of([&] { validate(s, "strategy"); }),
            "strategy: a2a_dtype: must be one of fp32, bf16, fp8 per direction, got fp16/bf16");
}

TEST(WireDtype, RowBytesPerDtypeWithFp8sScalesPer128Values) {
  EXPECT_EQ(wire_row_bytes(256, core::Dtype::kFp32), 1024);
  EXPECT_EQ(wire_row_bytes(256, core::Dtype::kBf16), 512);
  EXPECT_EQ(wire_row_bytes(256, core::Dtype::kFp8), 256 + 2 * 4);
  EXPECT_EQ(wire_row_bytes(7168, core::Dtype::kFp8), 7168 + 56 * 4);  // DeepSeek-V3's hidden
  EXPECT_EQ(wire_row_bytes(129, core::Dtype::kFp8), 129 + 2 * 4);     // a partial block's scale
  EXPECT_EQ(wire_row_bytes(64, core::Dtype::kFp8), 64 + 4);
}

// What the text set explicitly is what a planner must leave alone.
TEST(Strategy, ParsedKnobsRecordWhatTheTextSet) {
  ParsedStrategy named = parse_strategy_knobs("monta-o2", "-");
  EXPECT_EQ(named.strategy, named_strategy("monta-o2"));
  EXPECT_EQ(named.method, "monta-o2");
  EXPECT_TRUE(named.explicit_knobs.empty());

  ParsedStrategy based = parse_strategy_knobs("base=fsmoe,chunks_fwd=2", "-");
  EXPECT_EQ(based.method, "fsmoe");
  EXPECT_EQ(based.explicit_knobs, (std::set<std::string>{"chunks_fwd"}));
  EXPECT_EQ(based.strategy.chunks_fwd, 2);
  EXPECT_EQ(based.strategy.chunks_bwd, named_strategy("fsmoe").chunks_bwd);
  EXPECT_EQ(based.strategy, parse_strategy("base=fsmoe,chunks_fwd=2", "-"));

  ParsedStrategy both = parse_strategy_knobs("base=lina,chunks=3,grad_partitions=7,name=x", "-");
  EXPECT_EQ(both.explicit_knobs,
            (std::set<std::string>{"chunks_fwd", "chunks_bwd", "grad_partitions", "name"}));
  EXPECT_TRUE(both.is_explicit("chunks_bwd"));
  EXPECT_FALSE(both.is_explicit("hybrid_domain"));

  EXPECT_EQ(parse_strategy_knobs("base=hybridep", "-").strategy.name, "hybridep");
  EXPECT_TRUE(parse_strategy_knobs("base=hybridep", "-").explicit_knobs.empty());
  ParsedStrategy bare = parse_strategy_knobs("a2a=2dh", "-");
  EXPECT_TRUE(bare.method.empty());
  EXPECT_EQ(bare.explicit_knobs, (std::set<std::string>{"a2a"}));
  EXPECT_ERROR_HAS(parse_strategy_knobs("base=lina,chunks=0", "--strategy"), "--strategy: chunks");
}

TEST(Strategy, ErrorsNameTheKnobAndListTheAccepted) {
  EXPECT_ERROR_HAS(parse_strategy("fastest", "--strategy"), "--strategy", "unknown strategy",
                   "\"fastest\"", "baseline", "monta-o3", "netmoe");
  EXPECT_ERROR_HAS(parse_strategy("chunkz=4", "--strategy"), "--strategy: chunkz", "unknown knob",
                   "chunks_fwd", "grad_sync", "base");
  EXPECT_ERROR_HAS(parse_strategy("a2a=3dh", "-"), "a2a", "\"3dh\"", "flat, 1dh, 2dh");
  EXPECT_ERROR_HAS(parse_strategy("grad_sync=fair", "-"), "grad_sync", "bucketed, lina, fsmoe");
  EXPECT_ERROR_HAS(parse_strategy("tp_dispatch=drop", "-"), "replicate, drop-allgather");
  EXPECT_ERROR_HAS(parse_strategy("placement=x", "-"), "none, netmoe");
  EXPECT_ERROR_HAS(parse_strategy("expert_transfer=x", "-"), "none, hybrid");
  EXPECT_ERROR_HAS(parse_strategy("copy_pipelining=yes", "-"), "true, false");
  EXPECT_ERROR_HAS(parse_strategy("chunks=0", "-"), "chunks", "[1, 1024]", "0");
  EXPECT_ERROR_HAS(parse_strategy("chunks=two", "-"), "chunks", "integer");
  EXPECT_ERROR_HAS(parse_strategy("compression=0", "-"), "compression", "(0, 1]");
  EXPECT_ERROR_HAS(parse_strategy("hybrid_levels=2x0", "-"), "hybrid_levels", "[1, 1000000]");
  EXPECT_ERROR_HAS(parse_strategy("hybrid_levels=2x,", "-"), "hybrid_levels");
  EXPECT_ERROR_HAS(parse_strategy("hybrid_levels=2x2,hybrid_domain=2", "-"), "hybrid_levels",
                   "product 4");
  EXPECT_ERROR_HAS(parse_strategy("compression=1.5", "-"), "compression", "(0, 1]");
  EXPECT_ERROR_HAS(parse_strategy("grad_partitions=-1", "-"), "grad_partitions");
  EXPECT_ERROR_HAS(parse_strategy("chunks=2,base=lina", "-"), "base", "must come first");
  EXPECT_ERROR_HAS(parse_strategy("base=best", "-"), "base", "unknown strategy \"best\"");
  EXPECT_ERROR_HAS(parse_strategy("chunks=2,oops", "-"), "expected knob=value", "\"oops\"");
  EXPECT_ERROR_HAS(parse_strategy("copy_pipelining=true", "-"), "copy_pipelining",
                   "drop-allgather");
  EXPECT_ERROR_HAS(parse_strategy("tp_dispatch=drop-allgather,copy_pipelining=true", "-"),
                   "copy_pipelining", "pipeline_experts=false");
  EXPECT_ERROR_HAS(named_strategy("nope"), "unknown strategy \"nope\"");
}

TEST(Strategy, ARepeatedKnobIsRefusedByName) {
  using moecomm::testing::error_of;
  EXPECT_EQ(error_of([] { parse_strategy("chunks=2,chunks=3", "--strategy"); }),
            "--strategy: chunks: given twice");
  EXPECT_EQ(error_of([] { parse_strategy("base=lina,a2a=2dh,a2a=flat", "--strategy"); }),
            "--strategy: a2a: given twice");
  EXPECT_EQ(error_of([] { parse_strategy("base=lina,base=fsmoe", "--strategy"); }),
            "--strategy: base: given twice");
  // chunks sets both phases: beside chunks_fwd one of the two values would win by position.
  EXPECT_EQ(error_of([] { parse_strategy("chunks=2,chunks_fwd=3", "--strategy"); }),
            "--strategy: chunks_fwd: sets chunks_fwd, which another item already set (chunks "
            "sets both chunks_fwd and chunks_bwd)");
  EXPECT_EQ(error_of([] { parse_strategy("chunks_bwd=3,chunks=2", "--strategy"); }),
            "--strategy: chunks: sets chunks_bwd, which another item already set (chunks sets "
            "both chunks_fwd and chunks_bwd)");
  // The per-phase knobs together are two knobs, and hybrid_levels beside a matching
  // hybrid_domain is what to_string writes: both still parse.
  const Strategy s = parse_strategy("chunks_fwd=2,chunks_bwd=3", "-");
  EXPECT_EQ(s.chunks_fwd, 2);
  EXPECT_EQ(s.chunks_bwd, 3);
  EXPECT_EQ(parse_strategy("hybrid_domain=4,hybrid_levels=2x2", "-").hybrid_domain, 4);
}

TEST(Strategy, AnEmptyItemIsRefused) {
  using moecomm::testing::error_of;
  EXPECT_EQ(error_of([] { parse_strategy("base=lina,,chunks=2", "--strategy"); }),
            "--strategy: item 2 of \"base=lina,,chunks=2\" is empty (separate items by single "
            "commas, none at either end)");
  EXPECT_EQ(error_of([] { parse_strategy("lina,", "--strategy"); }),
            "--strategy: item 2 of \"lina,\" is empty (separate items by single commas, none at "
            "either end)");
}

TEST(Strategy, NearMissNamesGetASuggestion) {
  using moecomm::testing::error_of;
  const std::string knobs =
      "base, a2a, a2a_dtype, chunks, chunks_bwd, chunks_fwd, comm_priority, compression, "
      "copy_pipelining, expert_transfer, grad_partitions, grad_sync, hybrid_domain, hybrid_levels, "
      "name, "
      "overlap_microbatches, pipeline_experts, placement, pp_schedule, recompute_experts, "
      "shared_expert, sr_feedback, tp_dispatch, zero";
  EXPECT_EQ(error_of([] { parse_strategy("chunk=2", "--strategy"); }),
            "--strategy: chunk: unknown knob; did you mean 'chunks'? (accepted: " + knobs + ")");
  EXPECT_EQ(error_of([] { parse_strategy("base=lina,grad_partition=8", "--strategy"); }),
            "--strategy: grad_partition: unknown knob; did you mean 'grad_partitions'? "
            "(accepted: " +
                knobs + ")");
  EXPECT_EQ(error_of([] { parse_strategy("a2a=2hd", "--strategy"); }),
            "--strategy: a2a: unknown value \"2hd\"; did you mean '2dh'? (accepted: flat, 1dh, "
            "2dh, pairwise, dedup)");
  EXPECT_EQ(error_of([] { parse_strategy("monta-o4", "--strategy"); }),
            "--strategy: unknown strategy \"monta-o4\"; did you mean 'monta-o1', 'monta-o2' or "
            "'monta-o3'? (accepted: baseline, hier-a2a, monta-o1, monta-o2, monta-o3, fsmoe, "
            "lina, hybridep, netmoe, or knob=value,... with knobs " +
                knobs + ")");
  EXPECT_EQ(error_of([] { parse_strategy("base=fsmo,chunks=2", "--strategy"); }),
            "--strategy: base: unknown strategy \"fsmo\"; did you mean 'fsmoe'? (accepted: "
            "baseline, hier-a2a, monta-o1, monta-o2, monta-o3, fsmoe, lina, hybridep, netmoe, or "
            "knob=value,... with knobs " +
                knobs + ")");
  // A strategy name where base=NAME belongs: the text rewritten with it first.
  EXPECT_EQ(error_of([] { parse_strategy("lina,chunks=2", "--strategy"); }),
            "--strategy: \"lina\" is a strategy name, not knob=value; did you mean "
            "'base=lina,chunks=2'? (base=NAME comes first)");
  EXPECT_EQ(error_of([] { parse_strategy("chunks=2,a2a=2dh,fsmoe", "--strategy"); }),
            "--strategy: \"fsmoe\" is a strategy name, not knob=value; did you mean "
            "'base=fsmoe,chunks=2,a2a=2dh'? (base=NAME comes first)");
  EXPECT_EQ(error_of([] { parse_strategy("chunks=2,chunk", "--strategy"); }),
            "--strategy: expected knob=value, got \"chunk\"; did you mean 'chunks'? (knobs: " +
                knobs + ")");
}

}  // namespace
}  // namespace moecomm::sched
