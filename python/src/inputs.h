#pragma once
// The model, cluster and parallel configuration of a Python call, each given as a preset
// name, a JSON file path or a dict in the file's format (None: the CLI's default), resolved
// by the CLI's own rules (core/model_setup.h).
#include <cstdint>

#include <pybind11/pybind11.h>

#include "core/model_setup.h"

namespace moecomm::python {

// Throws moecomm::Error naming the argument ("model", "cluster", "parallel") or the file.
core::ModelSetup resolve_setup(const pybind11::object& model, const pybind11::object& cluster,
                               const pybind11::object& parallel, int64_t seq_len = 0,
                               int64_t micro_batch = 0);

// The "key=value,..." or dict parallel spec; None gives every size left out.
core::ParallelSpec parallel_spec(const pybind11::object& parallel);

}  // namespace moecomm::python
