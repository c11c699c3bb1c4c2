#include "routing_args.h"

#include "core/error.h"

namespace moecomm::python {

plan::StepArgNames step_arg_names() {
  plan::StepArgNames names;
  names.strategy = "strategy";
  names.routing = "routing";
  names.ask_synthetic = "routing=\"synthetic\"";
  names.fairness = "fairness";
  names.layers = "layers";
  names.micro_batches = "micro_batches";
  names.pp_schedule = "pp_schedule";
  names.zero = "zero";
  return names;
}

plan::StepRouting routing_arg(const std::string& routing, double locality) {
  const plan::StepRouting r = plan::parse_step_routing(routing, "routing");
  if (!(locality >= 0 && locality <= 1)) throw Error("locality", "must be in [0, 1]");
  return r;
}

}  // namespace moecomm::python
