#include "core/json_reader.h"

#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/suggest.h"

namespace moecomm::core {

using nlohmann::json;

namespace {

// A value as an error message shows it: scalars as written, containers by type only (a
// deeply nested or huge value must not be pasted into the message).
std::string shown(const json& v) {
  if (v.is_structured()) return std::string("an ") + v.type_name();
  std::string text = v.dump();
  return text.size() > 60 ? text.substr(0, 57) + "..." : text;
}

}  // namespace

json read_json_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw Error(path, "cannot open file");
  std::stringstream text;
  text << in.rdbuf();
  return parse_json_text(text.str(), path);
}

json parse_json_text(const std::string& text, const std::string& where) {
  try {
    return json::parse(text);
  } catch (const json::exception& e) {  // syntax, and numbers out of range (1e400)
    throw Error(where, std::string("invalid JSON: ") + e.what());
  }
}

JsonReader::JsonReader(const json& obj, std::string where) : obj_(obj), where_(std::move(where)) {
  if (!obj_.is_object()) throw Error(where_, "must be a JSON object");
}

bool JsonReader::has(const std::string& key) const {
  asked_.insert(key);
  return obj_.contains(key);
}

std::string JsonReader::where(const std::string& key) const {
  bool nested = where_.find(": ") != std::string::npos;
  return where_ + (nested ? "." : ": ") + key;
}

const json& JsonReader::require(const std::string& key) {
  if (!obj_.contains(key)) throw Error(where(key), "missing key");
  read_.insert(key);
  return obj_.at(key);
}

const json& JsonReader::value(const std::string& key) {
  return require(key);
}

std::string JsonReader::string(const std::string& key) {
  const json& v = require(key);
  if (!v.is_string()) throw Error(where(key), "must be a string, got " + shown(v));
  return v.get<std::string>();
}

double JsonReader::number(const std::string& key) {
  const json& v = require(key);
  if (!v.is_number()) throw Error(where(key), "must be a number, got " + shown(v));
  double x = v.get<double>();
  if (!std::isfinite(x)) throw Error(where(key), "must be finite");
  return x;
}

bool JsonReader::boolean(const std::string& key) {
  const json& v = require(key);
  if (!v.is_boolean()) throw Error(where(key), "must be true or false, got " + shown(v));
  return v.get<bool>();
}

double JsonReader::positive(const std::string& key) {
  double x = number(key);
  if (!(x > 0)) throw Error(where(key), "must be positive, got " + shown(obj_.at(key)));
  return x;
}

double JsonReader::positive(const std::string& key, double max) {
  double x = positive(key);
  if (x > max)
    throw Error(where(key),
                "too large (at most " + shown(json(max)) + "), got " + shown(obj_.at(key)));
  return x;
}

double JsonReader::in_range(const std::string& key, const Range& range) {
  const double x = number(key);
  auto g = [](double v) {
    char text[32];
    std::snprintf(text, sizeof text, "%g", v);
    return std::string(text);
  };
  const std::string stated =
      " (the range is " + g(range.min) + " to " + g(range.max) + ": " + range.meaning + ")";
  const std::string got = shown(obj_.at(key));
  if (x < range.min) {
    if (range.min == 0) throw Error(where(key), "must not be negative, got " + got + stated);
    if (x <= 0) throw Error(where(key), "must be positive, got " + got + stated);
    throw Error(where(key), "too small: " + got + " is below " + g(range.min) + stated);
  }
  if (x > range.max)
    throw Error(where(key), "too large: " + got + " is above " + g(range.max) + stated);
  return x;
}

int64_t JsonReader::positive_int(const std::string& key, int64_t max) {
  int64_t x = positive_int(key);
  if (x > max)
    throw Error(where(key),
                "too large (at most " + std::to_string(max) + "), got " + std::to_string(x));
  return x;
}

int64_t JsonReader::integer(const std::string& key) {
  const json& v = require(key);
  if (!v.is_number_integer()) throw Error(where(key), "must be an integer, got " + shown(v));
  return v.get<int64_t>();
}

int64_t JsonReader::positive_int(const std::string& key) {
  int64_t x = integer(key);
  if (x < 1) throw Error(where(key), "must be a positive integer, got " + std::to_string(x));
  return x;
}

std::optional<double> JsonReader::nullable_positive(const std::string& key) {
  if (require(key).is_null()) return std::nullopt;
  return positive(key);
}

const json& JsonReader::array(const std::string& key) {
  const json& v = require(key);
  if (!v.is_array()) throw Error(where(key), "must be a list, got " + shown(v));
  return v;
}

JsonReader JsonReader::object(const std::string& key) {
  const json& v = require(key);
  if (!v.is_object()) throw Error(where(key), "must be an object, got " + shown(v));
  return JsonReader(v, where(key));
}

void JsonReader::reject_unknown() const {
  for (const auto& [key, _] : obj_.items()) {
    if (read_.count(key)) continue;
    std::set<std::string> known = asked_;
    known.insert(read_.begin(), read_.end());
    throw Error(where(key), "unknown key" + did_you_mean(key, std::vector<std::string>(
                                                                  known.begin(), known.end())));
  }
}

}  // namespace moecomm::core
