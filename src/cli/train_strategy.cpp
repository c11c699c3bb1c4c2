#include "cli/train_strategy.h"

#include <algorithm>
#include <sstream>

#include "core/error.h"
#include "core/presets.h"
#include "core/rank_groups.h"
#include "core/topology.h"
#include "plan/planned_strategy.h"
#include "rt/scheduled_train.h"
#include "sched/build_hybridep.h"

namespace moecomm::cli {
namespace {

// Lina's expert packing (Sec. 4.2): k experts per device, so the A2A runs among E / k
// devices: the EP size the Lina estimate chose, when --parallel leaves ep open and it fits.
std::string lina_packing(rt::TrainConfig& c, const plan::PlanInput& in, int world) {
  const plan::ModelEstimates p = plan::estimate_strategies(in);
  for (const plan::StrategyEstimate& e : p.strategies) {
    if (!e.lina) continue;
    const int ep = e.lina->ep_group, tp = std::max(c.tp, 1);
    if (ep < 1 || (world / tp) % ep != 0 || c.model.moe.experts % ep != 0)
      return "ep kept at " + std::to_string(world / tp) +
             ": Lina's packing chose ep=" + std::to_string(ep) +
             ", which does not split the ranks and experts";
    c.ep = ep;
    return "ep=" + std::to_string(ep) +
           " from Lina Sec. 4.2 (expert packing: " + std::to_string(c.model.moe.experts / ep) +
           " experts per device)";
  }
  return "ep kept at " + std::to_string(world / std::max(c.tp, 1)) +
         ": the planner skipped Lina's packing here";
}

}  // namespace

core::ModelConfig planner_model(const rt::TrainConfig& c, const std::string& name) {
  core::ModelConfig m = rt::schedule_model(c);
  m.name = name;
  return m;
}

// --strategy, with --a2a as the a2a knob's shortcut (both given: they must agree), and the
// knobs it leaves unset chosen by the planner for --cluster. Returns the notes.
std::vector<std::string> resolve_strategy(rt::TrainConfig& c, const std::string& text,
                                          const std::string& a2a, bool a2a_given,
                                          const std::string& cluster, const std::string& model,
                                          int world) {
  const sched::ParsedStrategy parsed =
      sched::parse_strategy_knobs(text.empty() ? "baseline" : text, "--strategy");
  const sched::Algorithm flag = sched::parse_a2a_algorithm(a2a, "--a2a");
  if (a2a_given && parsed.explicit_knobs.count("a2a") && parsed.strategy.a2a != flag)
    throw Error("--strategy", "says a2a=" + std::string(sched::to_string(parsed.strategy.a2a)) +
                                  " but --a2a says " + a2a);
  std::vector<std::string> notes;
  c.strategy = parsed.strategy;
  if (!cluster.empty()) {
    plan::PlanInput in;
    in.model = planner_model(c, model);
    in.cluster = core::load_cluster(cluster);
    c.cluster = in.cluster;
    if (in.cluster.world_size() != world)
      throw Error("--cluster", cluster + " has " + std::to_string(in.cluster.world_size()) +
                                   " devices, the job " + std::to_string(world) + " ranks");
    const int tp = std::max(c.tp, 1), pp = std::max(c.pp, 1), stage = world / pp;
    const int ep = c.ep > 0 ? c.ep : stage / tp;
    in.parallel.tp = in.parallel.esp = tp;
    in.parallel.pp = pp;
    in.parallel.dp = stage / tp;
    in.parallel.ep = ep;
    in.parallel.edp = stage / (tp * ep);
    std::string text_notes;
    c.strategy = plan::planned_strategy(parsed, in, &text_notes);
    std::istringstream lines(text_notes);
    for (std::string line; std::getline(lines, line);) notes.push_back(line);
    if (parsed.method == "lina" && c.ep == 0) notes.push_back(lina_packing(c, in, world));
    if (c.strategy.expert_transfer == sched::ExpertTransfer::kHybrid &&
        !c.strategy.hybrid_levels.empty()) {  // HybridEP's location renumbering
      const core::RankGroup ep = core::build_rank_groups(in.parallel).ep.front();
      c.hybrid_order = sched::hybrid_member_order(core::Topology(in.cluster), ep,
                                                  c.strategy.hybrid_levels, "--strategy");
    }
  }
  if (a2a_given) c.strategy.a2a = flag;
  return notes;
}

void apply_pp_schedule(rt::TrainConfig& c, const std::string& strategy_text,
                       const std::string& pp_schedule) {
  if (pp_schedule.empty()) return;
  sched::Strategy flag = c.strategy;
  sched::parse_pp_schedule(flag, pp_schedule, "--pp-schedule");
  const sched::ParsedStrategy parsed =
      sched::parse_strategy_knobs(strategy_text.empty() ? "baseline" : strategy_text, "--strategy");
  if (parsed.explicit_knobs.count("pp_schedule") &&
      (parsed.strategy.pp_schedule != flag.pp_schedule ||
       parsed.strategy.virtual_stages != flag.virtual_stages))
    throw Error("--pp-schedule", pp_schedule + " but --strategy says pp_schedule=" +
                                     sched::pp_schedule_name(parsed.strategy));
  c.strategy.pp_schedule = flag.pp_schedule;
  c.strategy.virtual_stages = flag.virtual_stages;
}

}  // namespace moecomm::cli
