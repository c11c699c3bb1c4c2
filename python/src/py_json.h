#pragma once
// Python objects <-> JSON values, for the inputs that are JSON documents in the CLI (model
// and cluster dicts) and the outputs that are JSON in the library (a plan row's params, the
// workload, a Chrome trace). Typed results are bound as classes, not through these.
#include <string>

#include <pybind11/pybind11.h>
#include <nlohmann/json.hpp>

namespace moecomm::python {

// None, bool, int, finite float, str, list/tuple and dict with str keys, nested at most 64
// deep and never inside themselves; anything else throws moecomm::Error naming `where` and
// the path inside it, e.g. "model: hidden".
nlohmann::json to_json(const pybind11::handle& obj, const std::string& where);
pybind11::object from_json(const nlohmann::json& value);

}  // namespace moecomm::python
