#include "cli/bench_case.h"

#include "cli/bench_trace.h"

#include <algorithm>
#include "cli/train_strategy.h"
#include "core/statistics.h"
#include "core/topology.h"
#include "rt/mpi_base.h"
#include "rt/train_groups.h"
#include "sched/layer_builder.h"
#include "sim/phase_times.h"
#include "sim/simulator.h"
#include "sim/trace_export.h"

namespace moecomm::cli {
namespace {

// Quantile q over the steps after the warm-up; the median (q = 0.5) is what bench compares
// (noise on a shared machine is one-sided).
BenchPhases measured_phases(const std::vector<rt::StepReport>& steps, int warmup, double q) {
  std::vector<double> fwd, bwd, grad, step;
  for (size_t i = static_cast<size_t>(warmup); i < steps.size(); ++i) {
    fwd.push_back(steps[i].token_fwd_ms);
    bwd.push_back(steps[i].token_bwd_ms);
    grad.push_back(steps[i].grad_sync_ms);
    step.push_back(steps[i].synced_ms);
  }
  return {core::quantile(fwd, q), core::quantile(bwd, q), core::quantile(grad, q),
          core::quantile(step, q)};
}

// The same step in the simulator: the planner's model of the run's batch, its parallel
// folding, the strategy with the same knobs, the LM head and the dispatch matrices the run
// measured. With `trace`, also the schedule's Chrome trace events; and the per-op comparison.
BenchPhases simulated_phases(const BenchSetup& setup, const rt::TrainConfig& c,
                             const rt::TrainResult& result, int world, BenchCase& out) {
  sched::LayerSetup layer;
  layer.model = planner_model(c, setup.model_name);
  layer.cluster = setup.cluster;
  layer.parallel =
      rt::train_groups(world, c.tp, c.ep, c.model.moe.experts, 0, "--parallel").parallel;
  layer.strategy = c.strategy;
  layer.layers = c.model.layers;
  layer.lm_head = true;
  layer.optimizer = true;  // as the measured step (rt's schedule) ends
  layer.micro_batches = c.micro_batches;
  layer.a2a_pair_bytes = result.dispatch_bytes;
  layer.a2a_combine_pair_bytes = result.combine_bytes;
  layer.dense_grad_bytes = result.block_dense_grad_bytes;
  const sched::Schedule schedule = sched::build_training_step(layer);
  sim::SimOptions options;
  options.fairness = setup.fairness;
  const sim::SimResult r = sim::simulate(schedule, core::Topology(setup.cluster), options);
  const sim::PhaseTimes p = sim::phase_times(schedule, r);
  if (setup.trace) out.simulated_trace = sim::chrome_trace(schedule, r)["traceEvents"];
  if (result.schedule) {
    const auto first = result.op_times.begin() +
                       std::min<std::ptrdiff_t>(setup.warmup, std::ssize(result.op_times));
    out.ops = compare_ops(*result.schedule, {first, result.op_times.end()}, schedule, r);
  }
  return {p.token_fwd_s * 1e3, p.token_bwd_s * 1e3, p.grad_sync_s * 1e3, p.iteration_s * 1e3};
}

}  // namespace

BenchCase run_bench_case(const BenchSetup& setup, const std::string& strategy, int world) {
  rt::TrainConfig c = setup.train;
  c.steps = setup.warmup + setup.steps;
  c.trace_last_step = setup.trace;
  BenchCase out;
  out.name = strategy;
  out.notes =
      resolve_strategy(c, strategy, "flat", false, setup.cluster_path, setup.model_name, world);
  c.keep_op_times = true;
  out.strategy = sched::to_string(c.strategy);
  const rt::TrainResult result = rt::train(c);
  out.measured = measured_phases(result.steps, setup.warmup, 0.5);
  out.measured_p25 = measured_phases(result.steps, setup.warmup, 0.25);
  out.measured_p75 = measured_phases(result.steps, setup.warmup, 0.75);
  out.token_bytes = result.steps.back().a2a;
  out.expert_bytes = result.steps.back().expert;
  for (size_t i = static_cast<size_t>(setup.warmup); i < result.steps.size(); ++i)
    out.grad_overlap_s += result.steps[i].grad_sync.overlap_s / setup.steps;
  out.loss = result.steps.back().loss;
  int me = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &me);
  if (me != 0) return out;
  if (setup.trace && result.schedule)  // rank 0 keeps the schedule (keep_op_times)
    out.measured_trace = measured_trace_events(result.last_step_calls, *result.schedule);
  out.simulated = simulated_phases(setup, c, result, world, out);
  return out;
}

}  // namespace moecomm::cli
