#include "py_json.h"

#include "core/error.h"

namespace py = pybind11;

namespace moecomm::python {

nlohmann::json to_json(const py::handle& obj, const std::string& where) {
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
  if (py::isinstance<py::float_>(obj)) return obj.cast<double>();
  if (py::isinstance<py::str>(obj)) return obj.cast<std::string>();
  if (py::isinstance<py::dict>(obj)) {
    nlohmann::json out = nlohmann::json::object();
    for (const auto& [key, value] : obj.cast<py::dict>()) {
      if (!py::isinstance<py::str>(key))
        throw Error(where, "keys must be strings, got " + py::repr(key).cast<std::string>());
      const auto k = key.cast<std::string>();
      out[k] = to_json(value, where + ": " + k);
    }
    return out;
  }
  if (py::isinstance<py::list>(obj) || py::isinstance<py::tuple>(obj)) {
    nlohmann::json out = nlohmann::json::array();
    size_t i = 0;
    for (const auto& item : obj)
      out.push_back(to_json(item, where + "[" + std::to_string(i++) + "]"));
    return out;
  }
  // numpy scalars (np.int64, np.float32) are not int/float subclasses but convert losslessly.
  if (py::hasattr(obj, "item") && py::hasattr(obj, "dtype")) {
    const py::object item = obj.attr("item")();
    if (!py::hasattr(item, "item")) return to_json(item, where);
  }
  throw Error(where, "a " + py::str(obj.get_type().attr("__name__")).cast<std::string>() +
                         " is not a JSON value (use dict, list, str, int, float, bool or None)");
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
