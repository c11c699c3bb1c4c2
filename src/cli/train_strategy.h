#pragma once
// The strategy `moecomm train` runs: --strategy's knobs, --a2a's shortcut, and the
// knobs left unset chosen by the planner for --cluster (plan/planned_strategy.h), with
// Lina's expert packing setting the EP size when --parallel leaves it open.
#include <string>
#include <vector>

#include "core/model_config.h"
#include "rt/train_loop.h"
#include "sched/strategy.h"

namespace moecomm::cli {

// The model as the planner and the simulator see it (core::ModelConfig) for one rank's batch.
core::ModelConfig planner_model(const rt::TrainConfig& c, const std::string& name);

// Sets c.strategy (and c.ep for Lina's packing) and returns one note per planned knob.
// `model` names the model for the planner; `world` is the number of ranks. Throws Error
// naming --strategy, --a2a or --cluster on a conflict or a cluster of another size.
std::vector<std::string> resolve_strategy(rt::TrainConfig& c, const std::string& text,
                                          const std::string& a2a, bool a2a_given,
                                          const std::string& cluster, const std::string& model,
                                          int world);

// --pp-schedule gpipe|1f1b|interleaved:V into c.strategy's pp_schedule knob (empty: as the
// strategy has it). Throws Error naming --pp-schedule when `strategy_text` (--strategy) sets
// pp_schedule to another value.
void apply_pp_schedule(rt::TrainConfig& c, const std::string& strategy_text,
                       const std::string& pp_schedule);

}  // namespace moecomm::cli
