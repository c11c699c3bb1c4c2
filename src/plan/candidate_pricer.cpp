#include "plan/candidate_pricer.h"

#include <algorithm>

#include "core/error.h"
#include "sched/layer_builder.h"
#include "sim/sim_report.h"
#include "sim/simulator.h"

namespace moecomm::plan {

std::string parallel_string(const core::ParallelConfig& p) {
  return "dp=" + std::to_string(p.dp) + ",tp=" + std::to_string(p.tp) +
         ",ep=" + std::to_string(p.ep) + ",esp=" + std::to_string(p.esp) +
         ",pp=" + std::to_string(p.pp) + ",cp=" + std::to_string(p.cp) +
         (p.cp_layout == core::CpLayout::kVertical
              ? ""
              : ",cp_layout=" + std::string(core::to_string(p.cp_layout)));
}

CandidatePricer::CandidatePricer(const PlanInput& input, int layers)
    : input_(input), layers_(layers), topology_(input.cluster) {
  if (layers < 1) throw Error("plan layers", "must be at least 1, got " + std::to_string(layers));
}

CandidatePricer::Entry CandidatePricer::simulate(const Candidate& c) const {
  sched::LayerSetup setup;
  setup.model = input_.model;
  setup.cluster = input_.cluster;
  setup.parallel = c.parallel;
  setup.strategy = c.strategy;
  // The plan's blocks over all stages, at least one per stage and virtual stage.
  setup.layers = std::max(layers_, c.parallel.pp * c.strategy.virtual_stages);
  setup.micro_batches = static_cast<int>(input_.model.micro_batches);
  try {
    sched::validate(c.strategy, "candidate");
    const sched::Schedule schedule = sched::build_training_step(setup);
    const sim::SimReport r = sim::make_report(schedule, sim::simulate(schedule, topology_));
    return {PricedStep{r.forward_s, r.backward_s, r.iteration_s}, ""};
  } catch (const Error& e) {
    return {std::nullopt, e.what()};
  }
}

std::optional<PricedStep> CandidatePricer::price(const Candidate& c, std::string* why) {
  sched::Strategy knobs = c.strategy;
  knobs.name.clear();
  const std::string key = sched::to_string(knobs) + "|" + parallel_string(c.parallel);
  auto it = cache_.find(key);
  if (it == cache_.end()) {
    it = cache_.emplace(key, simulate(c)).first;
    if (!it->second.step) ++refused_;
  }
  if (why) *why = it->second.why;
  return it->second.step;
}

}  // namespace moecomm::plan
