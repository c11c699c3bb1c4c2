#pragma once
// The A2A routing a Python call prices or builds a step with (moecomm.simulate,
// build_schedule), as `moecomm sim --routing --locality` takes it: "uniform", "synthetic"
// with data locality (samples at home, or where NetMoE's placement puts them), or "auto"
// (synthetic for placement=netmoe, else uniform). plan/step_service.h routes the step.
#include <string>

#include "plan/step_service.h"

namespace moecomm::python {

// The Python keywords' names for the step service's errors.
plan::StepArgNames step_arg_names();

// Throws Error naming "routing" or "locality".
plan::StepRouting routing_arg(const std::string& routing, double locality);

}  // namespace moecomm::python
