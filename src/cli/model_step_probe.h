#pragma once
// `moecomm profile --model`: the device's workload is a training step of the model (its
// forward and backward on this rank's share of the experts, as the layer runs them under
// uniform routing), rated by the flops the simulator counts for that step.
#include <string>

#include "rt/device_profile.h"

namespace moecomm::cli {

// batch, seq_len: 0 for the model's own (as `moecomm bench` takes them). Throws Error naming
// --model when the experts do not split over the ranks or a rank would hold fewer than top_k.
rt::ModelStepProbe model_step_probe(const std::string& model, int world, int batch, int seq_len);

}  // namespace moecomm::cli
