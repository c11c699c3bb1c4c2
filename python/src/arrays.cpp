#include "arrays.h"

#include <limits>

#include "core/error.h"

namespace py = pybind11;

namespace moecomm::python {

namespace {

std::string shape_of(const py::array& a) {
  std::string s = "(";
  for (py::ssize_t d = 0; d < a.ndim(); ++d) s += (d ? ", " : "") + std::to_string(a.shape(d));
  return s + (a.ndim() == 1 ? ",)" : ")");
}

}  // namespace

py::array_t<int64_t> int_array(const py::handle& obj, int ndim, const std::string& where) {
  py::array a;
  try {
    a = py::module_::import("numpy").attr("asarray")(obj);
  } catch (const py::error_already_set& e) {
    throw Error(where, std::string("is not an array: ") + e.what());
  }
  if (a.ndim() != ndim) {
    throw Error(where, "must be a " + std::to_string(ndim) + "-D array" +
                           (ndim == 2 ? " (samples x experts)" : "") + ", got shape " +
                           shape_of(a));
  }
  // Counts and ids are integers: a float array is refused rather than truncated.
  const char kind = a.dtype().kind();
  if (kind != 'i' && kind != 'u' && !(a.size() == 0 && kind == 'f')) {
    throw Error(where, "must hold integers, got dtype " + py::str(a.dtype()).cast<std::string>());
  }
  if (kind == 'u' && a.dtype().itemsize() == 8) {  // uint64 beyond int64's range
    const auto u = py::array_t<uint64_t, py::array::c_style | py::array::forcecast>::ensure(a);
    for (py::ssize_t i = 0; i < u.size(); ++i)
      if (u.data()[i] > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
        throw Error(where, "value beyond the 64-bit signed range");
  }
  return py::array_t<int64_t, py::array::c_style | py::array::forcecast>::ensure(a);
}

std::vector<int> int_vector(const py::handle& obj, const std::string& where) {
  const auto a = int_array(obj, 1, where);
  std::vector<int> out(static_cast<size_t>(a.size()));
  for (py::ssize_t i = 0; i < a.size(); ++i) {
    const int64_t v = a.data()[i];
    if (v < std::numeric_limits<int>::min() || v > std::numeric_limits<int>::max())
      throw Error(where + "[" + std::to_string(i) + "]", std::to_string(v) + " is out of range");
    out[static_cast<size_t>(i)] = static_cast<int>(v);
  }
  return out;
}

}  // namespace moecomm::python
