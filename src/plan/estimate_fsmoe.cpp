// The FSMoE row: inter-node A2A, intra-node ESP-AllGather / ReduceScatter and expert GEMMs
// pipelined with degree r per phase (FSMoE Sec. 4), the gradient AllReduce partitioned into
// the backward's overlap windows (Sec. 5).
#include <map>

#include "core/optional_library.h"
#include "cost/least_squares.h"
#include "plan/estimates.h"
#include "plan/fsmoe_gradient_partition.h"
#include "plan/fsmoe_pipeline.h"

namespace moecomm::plan {

#if MOECOMM_HAVE_NLOPT
namespace {

// FSMoE fits Eq. 1's alpha and beta to micro-benchmarks over the message sizes it will
// send (Sec. 6.2); here the "measurements" are the collective model's times (efficiency
// curves included) at the chunk sizes n / r of every degree r tried.
template <class TimeOf>
cost::AlphaBeta fitted_line(double n, int max_degree, TimeOf time_of) {
  if (n <= 0) return {};
  std::vector<std::pair<double, double>> samples;
  for (int r = 1; r <= max_degree; ++r) samples.push_back({n / r, time_of(n / r)});
  // One degree (a one-token layer) gives one size: the empty message pins the start-up.
  if (max_degree == 1) samples.push_back({0.0, time_of(0.0)});
  cost::AlphaBeta line = cost::fit_alpha_beta(samples).line;
  if (line.alpha >= 0) return line;
  // A measured efficiency curve (moecomm profile) can bend the fit below zero at n = 0, and a
  // start-up time is never negative: the least-squares line through the origin instead.
  double xy = 0, xx = 0;
  for (const auto& [x, y] : samples) {
    xy += x * y;
    xx += x * x;
  }
  return {0.0, xx > 0 ? xy / xx : 0.0};
}

cost::AlphaBeta a2a_line(const EstimateContext& ctx, const core::RankGroup& group, double n,
                         int max_degree) {
  return fitted_line(n, max_degree, [&](double x) { return ctx.comm.alltoall_time(group, x); });
}

cost::AlphaBeta ring_line(const EstimateContext& ctx, cost::Collective op, const core::RankGroup& g,
                          double n, int max_degree) {
  const int level = ctx.comm.bottleneck_level(g);
  if (level == core::Topology::kSameDevice) return {};
  const int size = static_cast<int>(g.size());
  return fitted_line(n, max_degree, [&](double x) { return ctx.comm.time(op, level, size, x); });
}

FsmoeLayerModel forward_model(const EstimateContext& ctx, int max_degree) {
  const auto& w = ctx.work;
  const auto& p = ctx.input.parallel;
  FsmoeLayerModel m;
  // Tokens replicated over TP are sent once per ESP group and gathered inside it (Fig. 3).
  m.n_a2a = w.a2a_bytes / std::min(p.tp, p.esp);
  m.a2a = a2a_line(ctx, w.groups.ep.front(), m.n_a2a, max_degree);
  if (p.esp > 1) {
    m.n_ag = m.n_rs = m.n_a2a * p.esp;
    m.ag = ring_line(ctx, cost::Collective::kAllGather, w.groups.esp.front(), m.n_ag, max_degree);
    m.rs =
        ring_line(ctx, cost::Collective::kReduceScatter, w.groups.esp.front(), m.n_rs, max_degree);
  }
  m.exp = ctx.expert_line;
  m.n_exp = w.expert_flops;
  return m;
}

// The plan's MoE layers are identical, and Eq. 5's optimizer costs grow with the cube of
// the layer count; a window of this many layers gives the per-layer average.
constexpr int kGradientWindowLayers = 32;

// The MoE layers of one pipeline stage (at most the window) in backward order, each
// releasing its dense gradients for the layers after it (FSMoE Sec. 5.2).
FsmoeGradProblem gradient_problem(const EstimateContext& ctx, const FsmoeLayerModel& fwd) {
  FsmoeGradProblem problem;
  const auto& dp = ctx.work.groups.dp_cp.front();
  problem.allreduce = ctx.comm.line(cost::Collective::kAllReduce, ctx.comm.bottleneck_level(dp),
                                    static_cast<int>(dp.size()), ctx.work.dense_grad_bytes);
  const int layers = static_cast<int>(
      std::min<int64_t>(kGradientWindowLayers, ctx.input.model.layers / ctx.input.parallel.pp));
  for (int i = 0; i < layers; ++i)
    problem.layers.push_back({fsmoe_backward_model(fwd, 0.0), 2 * ctx.pre_expert_fwd_s,
                              i == 0 ? 0.0 : ctx.work.dense_grad_bytes});
  return problem;
}

int most_common_degree(const std::vector<FsmoeIntegerDegree>& degrees) {
  std::map<int, int> count;
  for (const auto& d : degrees) ++count[d.r];
  return std::max_element(count.begin(), count.end(),
                          [](auto& a, auto& b) { return a.second < b.second; })
      ->first;
}

}  // namespace

std::optional<StrategyEstimate> estimate_fsmoe(const EstimateContext& ctx, std::string& why) {
  if (ctx.work.inter_level == core::Topology::kSameDevice) {
    why = "the EP group has one rank: nothing to pipeline";
    return std::nullopt;
  }
  const int max_degree =
      static_cast<int>(std::min<int64_t>(kFsmoeDefaultMaxDegree, ctx.work.tokens));
  const FsmoeLayerModel fwd = forward_model(ctx, max_degree);
  const FsmoeDegree f = fsmoe_optimal_degree(fsmoe_forward_model(fwd), max_degree);
  StrategyEstimate e;
  e.name = "fsmoe";
  e.source = "FSMoE Sec. 4 (four-case model, exact integer r), Sec. 5 (gradient partition)";
  e.forward_s = f.exact.time;
  e.knobs.name = e.name;
  e.knobs.chunks_fwd = f.exact.r;
  e.fsmoe = FsmoeFigures{f.exact.which, f.relaxed.r};
  if (ctx.work.groups.dp_cp.front().size() > 1) {
    FsmoeGradProblem problem = gradient_problem(ctx, fwd);
    problem.max_degree = max_degree;
    const FsmoeGradPlan g = fsmoe_partition_gradients(problem, {1, 600, 200});
    // The gradients of the first layer to run backward are released only after the last
    // window and reduce on their own; spread over the layers like the objective.
    const double tail = problem.allreduce.time(ctx.work.dense_grad_bytes);
    e.backward_s = (g.objective + tail) / problem.layers.size();
    e.knobs.chunks_bwd = most_common_degree(g.backward);
    e.knobs.grad_sync = sched::GradSync::kFsmoe;
  } else {
    const FsmoeDegree b = fsmoe_optimal_degree(fsmoe_backward_model(fwd, 0.0), max_degree);
    e.backward_s = b.exact.time;
    e.knobs.chunks_bwd = b.exact.r;
  }
  // Expert gradients over EDP are not in FSMoE's partition: they follow the layer.
  e.backward_s += ctx.comm.group_time(cost::Collective::kAllReduce, ctx.work.groups.edp.front(),
                                      ctx.work.expert_grad_bytes);
  e.memory_bytes = ctx.base_memory_bytes;
  return e;
}
#else
// Algorithm 1's relaxed degree and Sec. 5's partition search run on NLopt: the row is
// skipped, and a step that leaves its knobs to the planner refuses (step_service.cpp).
std::optional<StrategyEstimate> estimate_fsmoe(const EstimateContext& /*ctx*/, std::string& why) {
  why = core::missing_library_reason(core::OptionalLibrary::kNlopt);
  return std::nullopt;
}
#endif

}  // namespace moecomm::plan
