#pragma once
// The extension module `moecomm._moecomm`, one binding file per library layer it exposes
// (plan, sim, place, infer, sched), and the kernels moecomm.torch shares with the runtime
// (codec, hybrid). The pure-Python package `moecomm` wraps these with type hints.
#include <pybind11/pybind11.h>

namespace moecomm::python {

void bind_plan(pybind11::module_& m);
void bind_sim(pybind11::module_& m);
void bind_place(pybind11::module_& m);
void bind_infer(pybind11::module_& m);
void bind_sched(pybind11::module_& m);
void bind_codec(pybind11::module_& m);
void bind_routing(pybind11::module_& m);
void bind_hybrid(pybind11::module_& m);

}  // namespace moecomm::python
