#include "py_json.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/error.h"

namespace py = pybind11;

namespace moecomm::python {

namespace {

// Deeper than any config file; a bound keeps a pathological nesting off the C stack.
constexpr size_t kMaxDepth = 64;

// `path`: the containers from the root to `obj`, for self-reference (a list inside itself).
nlohmann::json convert(const py::handle& obj, const std::string& where,
                       std::vector<PyObject*>& path);

nlohmann::json container(const py::handle& obj, const std::string& where,
                         std::vector<PyObject*>& path) {
  if (std::find(path.begin(), path.end(), obj.ptr()) != path.end())
    throw Error(where, "contains itself (a dict or list that refers to itself is not JSON)");
  if (path.size() >= kMaxDepth)
    throw Error(where, "nested deeper than " + std::to_string(kMaxDepth) + " levels");
  path.push_back(obj.ptr());
  nlohmann::json out;
  if (py::isinstance<py::dict>(obj)) {
    out = nlohmann::json::object();
    for (const auto& [key, value] : obj.cast<py::dict>()) {
      if (!py::isinstance<py::str>(key))
        throw Error(where, "keys must be strings, got " + py::repr(key).cast<std::string>());
      const auto k = key.cast<std::string>();
      out[k] = convert(value, where + ": " + k, path);
    }
  } else {
    out = nlohmann::json::array();
    size_t i = 0;
    for (const auto& item : obj)
      out.push_back(convert(item, where + "[" + std::to_string(i++) + "]", path));
  }
  path.pop_back();
  return out;
}

nlohmann::json convert(const py::handle& obj, const std::string& where,
                       std::vector<PyObject*>& path) {
  if (obj.is_none()) return nullptr;
  // bool before int: Python's bool is an int.
  if (py::isinstance<py::bool_>(obj)) return obj.cast<bool>();
  if (py::isinstance<py::int_>(obj)) {
    try {
      return obj.cast<long long>();
    } catch (const py::cast_error&) {
      throw Error(where, "integer out of the 64-bit range");
    }
  }
  if (py::isinstance<py::float_>(obj)) {
    const double x = obj.cast<double>();
    // JSON has no NaN or infinity: every number a file holds is finite.
    if (!std::isfinite(x))
      throw Error(where, "must be a finite number, got " + py::repr(obj).cast<std::string>());
    return x;
  }
  if (py::isinstance<py::str>(obj)) return obj.cast<std::string>();
  if (py::isinstance<py::dict>(obj) || py::isinstance<py::list>(obj) ||
      py::isinstance<py::tuple>(obj))
    return container(obj, where, path);
  // numpy scalars (np.int64, np.float32) are not int/float subclasses but convert losslessly.
  if (py::hasattr(obj, "item") && py::hasattr(obj, "dtype")) {
    const py::object item = obj.attr("item")();
    if (!py::hasattr(item, "item")) return convert(item, where, path);
  }
  throw Error(where, "a " + py::str(py::type::handle_of(obj).attr("__name__")).cast<std::string>() +
                         " is not a JSON value (use dict, list, str, int, float, bool or None)");
}

}  // namespace

nlohmann::json to_json(const py::handle& obj, const std::string& where) {
  std::vector<PyObject*> path;
  return convert(obj, where, path);
}

py::object from_json(const nlohmann::json& value) {
  switch (value.type()) {
    case nlohmann::json::value_t::null:
      return py::none();
    case nlohmann::json::value_t::boolean:
      return py::bool_(value.get<bool>());
    case nlohmann::json::value_t::number_integer:
      return py::int_(value.get<long long>());
    case nlohmann::json::value_t::number_unsigned:
      return py::int_(value.get<unsigned long long>());
    case nlohmann::json::value_t::number_float:
      return py::float_(value.get<double>());
    case nlohmann::json::value_t::string:
      return py::str(value.get<std::string>());
    case nlohmann::json::value_t::array: {
      py::list out;
      for (const auto& v : value) out.append(from_json(v));
      return out;
    }
    case nlohmann::json::value_t::object: {
      py::dict out;
      for (const auto& [k, v] : value.items()) out[py::str(k)] = from_json(v);
      return out;
    }
    default:  // binary and discarded values: the library writes neither
      return py::none();
  }
}

}  // namespace moecomm::python
