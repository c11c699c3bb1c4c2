#include "cli/planned_knobs.h"

#include <sstream>

#include "plan/planned_strategy.h"

namespace moecomm::cli {

std::vector<std::string> planned_knobs(const ModelSetup& setup, const std::string& strategy,
                                       bool ep_given, const std::string& flag,
                                       sched::LayerSetup& layer) {
  plan::PlanInput in;
  in.model = setup.model;
  in.cluster = setup.cluster;
  in.parallel = setup.parallel;
  const sched::ParsedStrategy parsed = sched::parse_strategy_knobs(strategy, flag);
  std::string notes;
  if (parsed.method == "lina" && !ep_given) {
    const plan::ModelEstimates estimates = plan::estimate_strategies(in);
    std::string packing;
    if (auto packed = plan::lina_packed_parallel(in, estimates, &packing)) {
      notes = packing + "\n";
      in.parallel = *packed;
    }
    layer.strategy = plan::planned_strategy(parsed, in, estimates, &notes);
  } else {
    layer.strategy = plan::planned_strategy(parsed, in, &notes);
  }
  layer.parallel = in.parallel;
  std::vector<std::string> lines;
  std::istringstream in_lines(notes);
  for (std::string line; std::getline(in_lines, line);) lines.push_back(line);
  return lines;
}

}  // namespace moecomm::cli
