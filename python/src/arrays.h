#pragma once
// numpy arrays (or anything numpy.asarray takes: lists, torch CPU tensors via .numpy()) in,
// checked once where they enter: shape and integer dtype, each error naming the argument.
#include <cstdint>
#include <string>
#include <vector>

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

namespace moecomm::python {

// A C-contiguous int64 view of `obj` (copied only when its dtype or layout differ). Throws
// moecomm::Error naming `where` unless it has `ndim` dimensions and an integer dtype.
pybind11::array_t<int64_t> int_array(const pybind11::handle& obj, int ndim,
                                     const std::string& where);

std::vector<int> int_vector(const pybind11::handle& obj, const std::string& where);

template <typename T>
pybind11::array_t<T> to_numpy(const std::vector<T>& v) {
  return pybind11::array_t<T>(static_cast<pybind11::ssize_t>(v.size()), v.data());
}

}  // namespace moecomm::python
