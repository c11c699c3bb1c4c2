#include "cli/model_step_probe.h"

#include <algorithm>

#include "cli/train_model.h"
#include "cli/train_strategy.h"
#include "core/error.h"
#include "rt/train_groups.h"
#include "sched/layer_builder.h"

namespace moecomm::cli {
namespace {

struct PhaseFlops {
  double forward = 0, backward = 0;
};

// The compute flops the simulator gives rank 0 for one step of the baseline, per phase.
PhaseFlops simulated_step_flops(const rt::TrainConfig& c, const std::string& name, int world) {
  sched::LayerSetup setup;
  setup.model = planner_model(c, name);
  setup.parallel = rt::train_groups(world, 1, world, c.model.moe.experts, 0, "--model").parallel;
  setup.strategy = sched::parse_strategy("baseline", "--model");
  setup.layers = c.model.layers;
  const sched::Schedule schedule = sched::build_training_step(setup);
  PhaseFlops flops;
  for (sched::OpId id : schedule.ops_of(0)) {
    const sched::Op& op = schedule.op(id);
    if (op.kind != sched::OpKind::kCompute) continue;
    const bool backward = schedule.label(id).phase == sched::Phase::kBackward;
    (backward ? flops.backward : flops.forward) += op.flops;
  }
  return flops;
}

}  // namespace

rt::ModelStepProbe model_step_probe(const std::string& model, int world, int batch, int seq_len) {
  rt::TrainConfig c;
  c.model = train_model(model, world);
  apply_batch_shape(c, model, batch, seq_len);
  const int experts = c.model.moe.experts;
  if (experts % world != 0 || experts / world < c.model.moe.top_k)
    throw Error("--model", std::to_string(experts) + " experts over " + std::to_string(world) +
                               " ranks: each rank must hold the same number, at least top_k = " +
                               std::to_string(c.model.moe.top_k));
  rt::ModelStepProbe probe;
  const PhaseFlops flops = simulated_step_flops(c, model, world);
  probe.forward_flops = flops.forward;
  probe.backward_flops = flops.backward;
  probe.model = c.model;
  probe.model.moe.experts = experts / world;
  probe.batch = c.batch;
  probe.seq_len = c.seq_len;
  return probe;
}

}  // namespace moecomm::cli
