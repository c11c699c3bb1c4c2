#pragma once
// Prices a candidate (knobs and parallel sizes) by simulating the very schedule `moecomm sim`
// builds for it (DESIGN.md "The one idea": the search planner checks candidates by
// simulation), so a plan row and `sim --strategy <row> --parallel <row>` give one answer.
#include <map>
#include <optional>
#include <string>

#include "core/parallel_config.h"
#include "core/topology.h"
#include "plan/strategy_table.h"
#include "sched/strategy.h"

namespace moecomm::plan {

// One point of the search space: the knobs and the parallel sizes (the EP size moves with
// Lina's expert packing).
struct Candidate {
  sched::Strategy strategy;
  core::ParallelConfig parallel;
};

// The times of one priced training step: forward and backward of `layers` MoE blocks on
// every rank, then the gradient sync (sim::SimReport's times). Not plan::SimulatedStep
// (step_service.h), the whole simulated step: one name, one type.
struct PricedStep {
  double forward_s = 0;
  double backward_s = 0;
  double step_s = 0;  // makespan
};

// "dp=..,tp=..,ep=..,esp=..,pp=..,cp=..[,cp_layout=horizontal]", as --parallel reads it.
std::string parallel_string(const core::ParallelConfig& parallel);

class CandidatePricer {
 public:
  // `input` must outlive the pricer. Throws moecomm::Error unless layers >= 1.
  CandidatePricer(const PlanInput& input, int layers);

  // The simulated step of `candidate`, cached by its knobs and parallel sizes (not its name).
  // nullopt when the schedule builder refuses the candidate (knobs its layout cannot run);
  // `why` then gets the builder's message.
  std::optional<PricedStep> price(const Candidate& candidate, std::string* why = nullptr);
  int priced() const { return static_cast<int>(cache_.size()); }
  int refused() const { return refused_; }

 private:
  struct Entry {
    std::optional<PricedStep> step;
    std::string why;
  };
  Entry simulate(const Candidate& candidate) const;

  const PlanInput& input_;
  int layers_;
  core::Topology topology_;
  std::map<std::string, Entry> cache_;
  int refused_ = 0;
};

}  // namespace moecomm::plan
