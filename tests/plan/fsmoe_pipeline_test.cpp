#include "plan/fsmoe_pipeline.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <random>

#include "core/error.h"

namespace moecomm::plan {
namespace {

// Hand-checkable model at r = 2 (FSMoE Eq. 1):
//   t_a2a = 1 + 4/2 * 0.5 = 2,  t_ag = 0.5 + 4/2 * 0.25 = 1,  t_rs = 0.5 + 2/2 * 0.5 = 1,
//   t_exp = 0.25 + 3/2 * 1 = 1.75.
FsmoeLayerModel hand_model(double t_gar) {
  FsmoeLayerModel m;
  m.a2a = {1.0, 0.5};
  m.ag = {0.5, 0.25};
  m.rs = {0.5, 0.5};
  m.exp = {0.25, 1.0};
  m.n_a2a = 4.0;
  m.n_ag = 4.0;
  m.n_rs = 2.0;
  m.n_exp = 3.0;
  m.t_gar = t_gar;
  return m;
}

double log_uniform(std::mt19937_64& rng, double lo, double hi) {
  return lo * std::pow(hi / lo, std::uniform_real_distribution<double>(0.0, 1.0)(rng));
}

// A line with total time alpha + n beta spread over regimes; some start-ups are zero, which
// makes the scan run to max_degree.
cost::AlphaBeta random_line(std::mt19937_64& rng, double n) {
  const bool zero_alpha = std::uniform_real_distribution<double>(0.0, 1.0)(rng) < 0.1;
  const double alpha = zero_alpha ? 0.0 : log_uniform(rng, 1e-3, 1.0);
  return {alpha, log_uniform(rng, 1e-2, 30.0) / n};
}

FsmoeLayerModel random_model(std::mt19937_64& rng) {
  FsmoeLayerModel m;
  m.n_a2a = log_uniform(rng, 1e5, 1e8);
  m.n_ag = log_uniform(rng, 1e5, 1e8);
  m.n_rs = std::uniform_real_distribution<double>(0.0, 1.0)(rng) < 0.5 ? m.n_ag
                                                                       : log_uniform(rng, 1e5, 1e8);
  m.n_exp = log_uniform(rng, 1e9, 1e12);
  m.a2a = random_line(rng, m.n_a2a);
  m.ag = random_line(rng, m.n_ag);
  m.rs = random_line(rng, m.n_rs);
  m.exp = random_line(rng, m.n_exp);
  const bool backward = std::uniform_real_distribution<double>(0.0, 1.0)(rng) < 0.5;
  m.t_gar = backward ? log_uniform(rng, 1e-2, 30.0) : 0.0;
  return m;
}

// The case formulas at a real r in the paper's expanded form (right-hand sides of Eq. 2 and
// of Case2-4), written independently of the implementation's chunk-time form.
std::array<double, 4> expanded_case_times(const FsmoeLayerModel& m, double r) {
  const double a2a = m.n_a2a * m.a2a.beta, ag = m.n_ag * m.ag.beta, rs = m.n_rs * m.rs.beta;
  const double exp = m.n_exp * m.exp.beta;
  return {2 * r * m.a2a.alpha + 2 * a2a + m.t_gar,
          2 * m.a2a.alpha + 2 * a2a / r + m.ag.alpha + ag / r + m.rs.alpha + rs / r +
              r * m.exp.alpha + exp,
          2 * r * m.a2a.alpha + 2 * a2a + m.ag.alpha + ag / r + m.rs.alpha + rs / r,
          2 * m.a2a.alpha + 2 * a2a / r + r * m.ag.alpha + ag + r * m.rs.alpha + rs};
}

// FSMoE Sec. 4.2 case table, transcribed literally from the text.
FsmoeCase paper_case(const FsmoeConditions& q) {
  const bool c1 = (q.q1 && !q.q2 && q.q4) || (q.q1 && q.q2 && q.q5) || (!q.q1 && !q.q3 && q.q6) ||
                  (!q.q1 && q.q3 && q.q7);
  const bool c2 = (q.q1 && q.q2 && !q.q5) || (!q.q1 && q.q3 && !q.q7);
  const bool c3 = q.q1 && !q.q2 && !q.q4;
  const bool c4 = !q.q1 && !q.q3 && !q.q6;
  EXPECT_EQ(c1 + c2 + c3 + c4, 1) << "paper's cases must partition the conditions";
  return c1 ? FsmoeCase::k1 : c2 ? FsmoeCase::k2 : c3 ? FsmoeCase::k3 : FsmoeCase::k4;
}

FsmoeIntegerDegree brute_force(const FsmoeLayerModel& m, int max_degree) {
  FsmoeIntegerDegree best{1, std::numeric_limits<double>::infinity(), FsmoeCase::k1};
  for (int r = 1; r <= max_degree; ++r) {
    const double t = fsmoe_layer_time(m, r);
    if (t < best.time) best = {r, t, fsmoe_case_at(m, r)};
  }
  return best;
}

TEST(FsmoePipeline, ChunkTimesFollowEq1) {
  const FsmoeChunkTimes c = fsmoe_chunk_times(hand_model(0.0), 2);
  EXPECT_DOUBLE_EQ(c.a2a, 2.0);
  EXPECT_DOUBLE_EQ(c.ag, 1.0);
  EXPECT_DOUBLE_EQ(c.rs, 1.0);
  EXPECT_DOUBLE_EQ(c.exp, 1.75);
}

TEST(FsmoePipeline, CaseFormulasByHand) {
  const FsmoeLayerModel m = hand_model(0.7);
  // Case1 (Eq. 2): 2 r t_a2a + t_gar = 8 + 0.7.
  EXPECT_DOUBLE_EQ(fsmoe_case_time(m, FsmoeCase::k1, 2), 8.7);
  // Case2: 2 t_a2a + t_ag + t_rs + r t_exp = 4 + 1 + 1 + 3.5.
  EXPECT_DOUBLE_EQ(fsmoe_case_time(m, FsmoeCase::k2, 2), 9.5);
  // Case3: 2 r t_a2a + t_ag + t_rs = 8 + 2.
  EXPECT_DOUBLE_EQ(fsmoe_case_time(m, FsmoeCase::k3, 2), 10.0);
  // Case4: 2 t_a2a + r t_ag + r t_rs = 4 + 2 + 2.
  EXPECT_DOUBLE_EQ(fsmoe_case_time(m, FsmoeCase::k4, 2), 8.0);
}

TEST(FsmoePipeline, ConditionsByHand) {
  // With t_gar = 0.7 at r = 2:
  //   Q1: 2 > 1;  Q2: 3.5 > 2*1*2 = 4 fails;  Q3: 3.5 > 1*(1+1);  Q4: 0.7 > 2 fails;
  //   Q5: 0.7 > 3.5 - 4 + 2 = 1.5 fails;  Q6: 0.7 > 2 + 2 - 4 = 0;  Q7: 0.7 > 2 + 3.5 - 4 fails.
  const FsmoeConditions q = fsmoe_conditions(hand_model(0.7), 2);
  EXPECT_TRUE(q.q1);
  EXPECT_FALSE(q.q2);
  EXPECT_TRUE(q.q3);
  EXPECT_FALSE(q.q4);
  EXPECT_FALSE(q.q5);
  EXPECT_TRUE(q.q6);
  EXPECT_FALSE(q.q7);
  // Q1 & !Q2 & !Q4 is Case3: the AlltoAlls dominate.
  EXPECT_EQ(fsmoe_case_at(hand_model(0.7), 2), FsmoeCase::k3);
  EXPECT_DOUBLE_EQ(fsmoe_layer_time(hand_model(0.7), 2), 10.0);
}

TEST(FsmoePipeline, GradientConditionsAreStrictAtTheirThresholds) {
  // At r = 2 the hand model's thresholds are Q4: t_ag + t_rs = 2; Q5: 3.5 - 4 + 2 = 1.5;
  // Q6: 2 + 2 - 4 = 0; Q7: 2 + 3.5 - 4 = 1.5. Each is strict (">").
  const double above = 1e-9;
  EXPECT_FALSE(fsmoe_conditions(hand_model(2.0), 2).q4);
  EXPECT_TRUE(fsmoe_conditions(hand_model(2.0 + above), 2).q4);
  EXPECT_FALSE(fsmoe_conditions(hand_model(1.5), 2).q5);
  EXPECT_TRUE(fsmoe_conditions(hand_model(1.5 + above), 2).q5);
  EXPECT_FALSE(fsmoe_conditions(hand_model(0.0), 2).q6);
  EXPECT_TRUE(fsmoe_conditions(hand_model(above), 2).q6);
  EXPECT_FALSE(fsmoe_conditions(hand_model(1.5), 2).q7);
  EXPECT_TRUE(fsmoe_conditions(hand_model(1.5 + above), 2).q7);
}

TEST(FsmoePipeline, PipelineConditionsAreStrictAtTheirThresholds) {
  // Q1: a2a {0.5, 0.25} gives t_a2a = 0.5 + 2 * 0.25 = 1 = t_ag. With n_exp = 0 (t_exp =
  // 0.25) neither Q2/Q3 nor a gradient condition holds, so the layer is Case4 (2 + 2 + 2)
  // at the threshold and Case3 (4 + 2) just above it.
  FsmoeLayerModel m = hand_model(0.0);
  m.a2a = {0.5, 0.25};
  m.n_exp = 0.0;
  EXPECT_FALSE(fsmoe_conditions(m, 2).q1);
  EXPECT_EQ(fsmoe_case_at(m, 2), FsmoeCase::k4);
  EXPECT_DOUBLE_EQ(fsmoe_layer_time(m, 2), 6.0);
  m.a2a.alpha += 1e-9;
  EXPECT_TRUE(fsmoe_conditions(m, 2).q1);
  EXPECT_EQ(fsmoe_case_at(m, 2), FsmoeCase::k3);
  EXPECT_NEAR(fsmoe_layer_time(m, 2), 6.0, 1e-8);
  // Q2: n_exp = 3.5 gives t_exp = 2, r t_exp = 4 = 2 (r - 1) t_a2a.
  m = hand_model(0.0);
  m.n_exp = 3.5;
  EXPECT_FALSE(fsmoe_conditions(m, 2).q2);
  m.exp.alpha += 1e-9;
  EXPECT_TRUE(fsmoe_conditions(m, 2).q2);
  // Q3: n_exp = 1.5 gives t_exp = 1, r t_exp = 2 = (r - 1)(t_ag + t_rs).
  m = hand_model(0.0);
  m.n_exp = 1.5;
  EXPECT_FALSE(fsmoe_conditions(m, 2).q3);
  m.exp.alpha += 1e-9;
  EXPECT_TRUE(fsmoe_conditions(m, 2).q3);
}

TEST(FsmoePipeline, EachCaseSelectedByHand) {
  // Case1: t_gar = 2.5 > t_ag + t_rs = 2 makes Q4 true; time 2*2*2 + 2.5.
  EXPECT_EQ(fsmoe_case_at(hand_model(2.5), 2), FsmoeCase::k1);
  EXPECT_DOUBLE_EQ(fsmoe_layer_time(hand_model(2.5), 2), 10.5);
  // Case2: n_exp = 6 gives t_exp = 3.25, r t_exp = 6.5 > 4 (Q2); Q5: 0.7 > 6.5-4+2 fails.
  FsmoeLayerModel experts = hand_model(0.7);
  experts.n_exp = 6.0;
  EXPECT_EQ(fsmoe_case_at(experts, 2), FsmoeCase::k2);
  EXPECT_DOUBLE_EQ(fsmoe_layer_time(experts, 2), 4.0 + 2.0 + 6.5);
  // Case4: a2a {0.25, 0.25} gives t_a2a = 0.75 < t_ag (not Q1); n_exp = 1 gives t_exp = 0.75,
  // r t_exp = 1.5 <= 1*2 (not Q3); Q6: 0.7 > 4 - 2*0.75 = 2.5 fails. Time 1.5 + 2 + 2.
  FsmoeLayerModel intra = hand_model(0.7);
  intra.a2a = {0.25, 0.25};
  intra.n_exp = 1.0;
  EXPECT_EQ(fsmoe_case_at(intra, 2), FsmoeCase::k4);
  EXPECT_DOUBLE_EQ(fsmoe_layer_time(intra, 2), 5.5);
}

TEST(FsmoePipeline, OverlappableTimeMatchesSection52) {
  // t_olp,moe is evaluated with t_gar = 0 whatever the model carries.
  // Case3: t_ag + t_rs = 2.
  EXPECT_DOUBLE_EQ(fsmoe_overlappable_time(hand_model(5.0), 2), 2.0);
  // Case2: r t_exp + t_ag + t_rs - 2(r-1) t_a2a = 6.5 + 2 - 4.
  FsmoeLayerModel experts = hand_model(0.0);
  experts.n_exp = 6.0;
  EXPECT_DOUBLE_EQ(fsmoe_overlappable_time(experts, 2), 4.5);
  // Case4: r t_ag + r t_rs - 2(r-1) t_a2a = 4 - 1.5.
  FsmoeLayerModel intra = hand_model(0.0);
  intra.a2a = {0.25, 0.25};
  intra.n_exp = 1.0;
  EXPECT_DOUBLE_EQ(fsmoe_overlappable_time(intra, 2), 2.5);
}

TEST(FsmoePipeline, CaseTableMatchesPaperForAllConditions) {
  for (int bits = 0; bits < 128; ++bits) {
    const FsmoeConditions q{(bits & 1) != 0,  (bits & 2) != 0,  (bits & 4) != 0, (bits & 8) != 0,
                            (bits & 16) != 0, (bits & 32) != 0, (bits & 64) != 0};
    EXPECT_EQ(fsmoe_select_case(q), paper_case(q)) << "conditions " << bits;
  }
}

TEST(FsmoePipeline, CaseFormulasMatchExpandedFormsOnRandomInputs) {
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 300; ++trial) {
    const FsmoeLayerModel m = random_model(rng);
    for (int r : {1, 2, 3, 7, 16}) {
      const std::array<double, 4> want = expanded_case_times(m, r);
      for (int c = 0; c < 4; ++c) {
        EXPECT_NEAR(fsmoe_case_time(m, static_cast<FsmoeCase>(c + 1), r), want[c], 1e-12 * want[c]);
      }
    }
  }
}

TEST(FsmoePipeline, SelectedCaseMatchesConditionsAndIsTheBottleneck) {
  // Reading of the case table: under Q1 the time is max(t1, t2, t3), otherwise max(t1, t2,
  // t4); Q2, Q3 and Q4-Q7 are exactly the pairwise comparisons between those formulas.
  std::mt19937_64 rng(11);
  std::array<int, 4> seen{};
  for (int trial = 0; trial < 2000; ++trial) {
    const FsmoeLayerModel m = random_model(rng);
    const int r = std::uniform_int_distribution<int>(1, 40)(rng);
    const FsmoeConditions q = fsmoe_conditions(m, r);
    const FsmoeCase c = fsmoe_case_at(m, r);
    EXPECT_EQ(c, paper_case(q));
    ++seen[static_cast<int>(c) - 1];
    const std::array<double, 4> t = expanded_case_times(m, r);
    const double bottleneck = std::max({t[0], t[1], q.q1 ? t[2] : t[3]});
    EXPECT_NEAR(fsmoe_layer_time(m, r), bottleneck, 1e-12 * bottleneck);
  }
  for (int c = 0; c < 4; ++c) EXPECT_GT(seen[c], 0) << "case " << c + 1 << " never drawn";
}

TEST(FsmoePipeline, OptimalIntegerDegreeEqualsBruteForce) {
  std::mt19937_64 rng(2024);
  std::array<int, 4> seen{};
  int above_one = 0;
  for (int trial = 0; trial < 1500; ++trial) {
    const FsmoeLayerModel m = random_model(rng);
    const int max_degree = trial % 3 == 0 ? 16 : 64;
    const FsmoeIntegerDegree got = fsmoe_optimal_integer_degree(m, max_degree);
    const FsmoeIntegerDegree want = brute_force(m, max_degree);
    ASSERT_EQ(got.r, want.r) << "trial " << trial;
    EXPECT_EQ(got.time, want.time);
    EXPECT_EQ(got.which, want.which);
    ++seen[static_cast<int>(got.which) - 1];
    above_one += got.r > 1;
  }
  for (int c = 0; c < 4; ++c) EXPECT_GT(seen[c], 0) << "case " << c + 1 << " never optimal";
  EXPECT_GT(above_one, 100) << "inputs should often favour pipelining";
}

TEST(FsmoePipeline, ZeroStartupsScanToMaxDegree) {
  // Without start-up costs every formula is non-increasing in r: the largest degree wins.
  FsmoeLayerModel m = hand_model(0.0);
  m.a2a.alpha = m.ag.alpha = m.rs.alpha = m.exp.alpha = 0.0;
  EXPECT_EQ(fsmoe_optimal_integer_degree(m, 37).r, 37);
}

TEST(FsmoePipeline, RelaxedDegreeIsALowerBoundAndConsistent) {
  std::mt19937_64 rng(99);
  for (int trial = 0; trial < 100; ++trial) {
    const FsmoeLayerModel m = random_model(rng);
    const int max_degree = 32;
    const FsmoeDegree d = fsmoe_optimal_degree(m, max_degree);
    const double tol = 1e-9 * d.exact.time;
    // Never worse than the integer optimum (integers are feasible points of the relaxation).
    EXPECT_LE(d.relaxed.time, d.exact.time + tol) << "trial " << trial;
    // No real r on a fine grid does better than SLSQP's answer.
    double grid = std::numeric_limits<double>::infinity();
    for (double r = 1.0; r <= max_degree; r += 1.0 / 64) {
      grid = std::min(grid, fsmoe_layer_time_relaxed(m, r));
    }
    EXPECT_LE(d.relaxed.time, grid + 1e-7 * grid) << "trial " << trial;
    // The reported time is the reported case's formula at the reported r.
    ASSERT_GE(d.relaxed.r, 1.0);
    ASSERT_LE(d.relaxed.r, max_degree);
    EXPECT_NEAR(d.relaxed.time, expanded_case_times(m, d.relaxed.r)[int(d.relaxed.which) - 1],
                1e-9 * d.relaxed.time);
    // Rounding the relaxed r picks the better neighbour, which cannot beat the exact optimum.
    const int lo = static_cast<int>(std::floor(d.relaxed.r));
    const int hi = std::min(max_degree, lo + 1);
    EXPECT_TRUE(d.relaxed.r_rounded == lo || d.relaxed.r_rounded == hi);
    EXPECT_EQ(d.relaxed.time_rounded, fsmoe_layer_time(m, d.relaxed.r_rounded));
    EXPECT_EQ(d.relaxed.time_rounded, std::min(fsmoe_layer_time(m, lo), fsmoe_layer_time(m, hi)));
    EXPECT_GE(d.relaxed.time_rounded, d.exact.time);
  }
}

// FSMoE Fig. 5 fitted lines, in the paper's units: ms, and per element (comm) / per flop
// (GEMM). Each expert is a two-GEMM FFN, so alpha_exp = 2 alpha_gemm (Sec. 4.1).
struct Testbed {
  cost::AlphaBeta gemm, a2a, ag, rs;
  int esp;
};
const Testbed kTestbedA{
    {4.26e-2, 2.29e-11}, {2.87e-1, 2.21e-7}, {3.37e-1, 2.32e-6}, {3.95e-1, 2.34e-7}, 8};
const Testbed kTestbedB{
    {9.24e-2, 4.42e-11}, {1.75e-1, 3.06e-7}, {3.20e-2, 1.68e-7}, {3.91e-2, 1.67e-7}, 4};

// A Table 4 layer: B = 4, L = 1024, M = 2048, H = 4M, top-2, f = 1.2, one local expert.
FsmoeLayerModel table4_layer(const Testbed& tb) {
  const double tokens = 4 * 1024, m = 2048, h = 4 * m, k = 2, f = 1.2;
  const double dispatched = k * f * tokens / tb.esp;  // this GPU's share of the token copies
  FsmoeLayerModel layer;
  layer.a2a = tb.a2a;
  layer.ag = tb.ag;
  layer.rs = tb.rs;
  layer.exp = {2 * tb.gemm.alpha, tb.gemm.beta};
  layer.n_a2a = dispatched * m;
  layer.n_ag = layer.n_rs = dispatched * tb.esp * m;               // gathered over ESP
  layer.n_exp = 2 * (2 * dispatched * tb.esp * m * (h / tb.esp));  // two GEMMs, H sharded
  return layer;
}

TEST(FsmoePipeline, TestbedCoefficientsFromFigure5) {
  for (const Testbed& tb : {kTestbedA, kTestbedB}) {
    const FsmoePhaseDegrees p = fsmoe_plan_phases(table4_layer(tb), 0.0, 64);
    const FsmoeLayerModel fwd = fsmoe_forward_model(table4_layer(tb));
    const FsmoeLayerModel bwd = fsmoe_backward_model(table4_layer(tb), 0.0);
    EXPECT_EQ(p.forward.exact.r, brute_force(fwd, 64).r);
    EXPECT_EQ(p.backward.exact.r, brute_force(bwd, 64).r);
    EXPECT_LE(p.forward.relaxed.time, p.forward.exact.time * (1 + 1e-9));
    EXPECT_LE(p.backward.relaxed.time, p.backward.exact.time * (1 + 1e-9));
    // Doubling the expert work cannot shorten the layer.
    EXPECT_GE(p.backward.exact.time, p.forward.exact.time);
  }
  // Testbed-A as printed has beta_ag = 2.32e-6 ms/element, ten times its ReduceScatter and
  // AlltoAll: with 20M gathered elements the AllGather chunk exceeds the AlltoAll chunk at
  // every r (not Q1) and the intra-node collectives set the pace (Case4) in both phases.
  const FsmoeLayerModel a = fsmoe_forward_model(table4_layer(kTestbedA));
  for (int r = 1; r <= 64; ++r) EXPECT_FALSE(fsmoe_conditions(a, r).q1);
  EXPECT_EQ(fsmoe_optimal_integer_degree(a).which, FsmoeCase::k4);
  // Testbed-B: the 2080Ti GEMMs dominate (Case2) in both phases. Case2's time is
  // r alpha_exp + (2 n_a2a beta_a2a + n_ag beta_ag + n_rs beta_rs) / r + const, minimised at
  // r = sqrt(bandwidth terms / alpha_exp); the backward doubles alpha_exp, so its relaxed
  // degree is the forward one over sqrt(2) (Sec. 4.4: the phases want different degrees).
  const FsmoePhaseDegrees b = fsmoe_plan_phases(table4_layer(kTestbedB), 0.0, 64);
  const FsmoeLayerModel fb = table4_layer(kTestbedB);
  const double bandwidth = 2 * fb.n_a2a * fb.a2a.beta + fb.n_ag * fb.ag.beta + fb.n_rs * fb.rs.beta;
  const double r_forward = std::sqrt(bandwidth / fb.exp.alpha);
  EXPECT_EQ(b.forward.relaxed.which, FsmoeCase::k2);
  EXPECT_EQ(b.backward.relaxed.which, FsmoeCase::k2);
  EXPECT_NEAR(b.forward.relaxed.r, r_forward, 1e-4 * r_forward);
  EXPECT_NEAR(b.backward.relaxed.r, r_forward / std::sqrt(2.0), 1e-4 * r_forward);
  EXPECT_EQ(b.forward.exact.which, FsmoeCase::k2);
  EXPECT_LT(b.backward.exact.r, b.forward.exact.r);
}

TEST(FsmoePipeline, BackwardDoublesExpertWorkAndCarriesGradientTime) {
  const FsmoeLayerModel fwd = hand_model(3.0);
  EXPECT_EQ(fsmoe_forward_model(fwd).t_gar, 0.0);
  const FsmoeLayerModel bwd = fsmoe_backward_model(fwd, 1.25);
  EXPECT_EQ(bwd.t_gar, 1.25);
  for (int r : {1, 2, 5}) {
    EXPECT_DOUBLE_EQ(fsmoe_chunk_times(bwd, r).exp, 2 * fsmoe_chunk_times(fwd, r).exp);
    EXPECT_DOUBLE_EQ(fsmoe_chunk_times(bwd, r).a2a, fsmoe_chunk_times(fwd, r).a2a);
  }
  const FsmoePhaseDegrees p = fsmoe_plan_phases(fwd, 1.25, 16);
  EXPECT_EQ(p.forward.exact.r, fsmoe_optimal_integer_degree(fsmoe_forward_model(fwd), 16).r);
  EXPECT_EQ(p.backward.exact.r, fsmoe_optimal_integer_degree(bwd, 16).r);
  EXPECT_EQ(p.backward.exact.time, fsmoe_optimal_integer_degree(bwd, 16).time);
}

TEST(FsmoePipeline, GradientTimeChangesTheBestDegree) {
  // Case1's time 2 r alpha_a2a + 2 n beta_a2a + t_gar grows with r, so a long enough
  // AllReduce pushes the optimum to r = 1; without it this layer pipelines.
  FsmoeLayerModel m = hand_model(0.0);
  m.n_a2a = m.n_ag = m.n_rs = 400.0;
  m.n_exp = 300.0;
  m.a2a.alpha = 0.1;
  const int quiet = fsmoe_optimal_integer_degree(m).r;
  m.t_gar = 1e4;
  EXPECT_GT(quiet, 1);
  EXPECT_EQ(fsmoe_optimal_integer_degree(m).r, 1);
  EXPECT_EQ(fsmoe_optimal_integer_degree(m).which, FsmoeCase::k1);
}

TEST(FsmoePipeline, BadInputThrows) {
  const FsmoeLayerModel ok = hand_model(0.0);
  EXPECT_THROW(fsmoe_layer_time(ok, 0), Error);
  EXPECT_THROW(fsmoe_chunk_times(ok, -3), Error);
  EXPECT_THROW(fsmoe_conditions(ok, 0), Error);
  EXPECT_THROW(fsmoe_case_time(ok, FsmoeCase::k2, 0), Error);
  EXPECT_THROW(fsmoe_layer_time_relaxed(ok, 0.5), Error);
  EXPECT_THROW(fsmoe_layer_time_relaxed(ok, std::nan("")), Error);
  EXPECT_THROW(fsmoe_optimal_integer_degree(ok, 0), Error);
  EXPECT_THROW(fsmoe_optimal_degree(ok, -1), Error);
  EXPECT_THROW(fsmoe_backward_model(ok, -1.0), Error);
  FsmoeLayerModel bad = ok;
  bad.a2a.alpha = -1.0;
  EXPECT_THROW(fsmoe_layer_time(bad, 1), Error);
  bad = ok;
  bad.exp.beta = -1e-9;
  EXPECT_THROW(fsmoe_optimal_integer_degree(bad), Error);
  bad = ok;
  bad.n_ag = std::numeric_limits<double>::quiet_NaN();
  EXPECT_THROW(fsmoe_validate(bad), Error);
  bad = ok;
  bad.n_rs = std::numeric_limits<double>::infinity();
  EXPECT_THROW(fsmoe_relaxed_degree(bad), Error);
  bad = ok;
  bad.t_gar = -0.5;
  EXPECT_THROW(fsmoe_overlappable_time(bad, 1), Error);
  try {
    fsmoe_layer_time(ok, 0);
    ADD_FAILURE() << "r = 0 did not throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("r must be >= 1"), std::string::npos);
  }
  EXPECT_THROW(fsmoe_optimal_integer_degree(ok, (1 << 20) + 1), Error);
}

}  // namespace
}  // namespace moecomm::plan
