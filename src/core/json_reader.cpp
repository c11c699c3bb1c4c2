#include "core/json_reader.h"

#include <cmath>
#include <fstream>
#include <sstream>

#include "core/error.h"

namespace moecomm::core {

using nlohmann::json;

json read_json_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw Error(path, "cannot open file");
  std::stringstream text;
  text << in.rdbuf();
  try {
    return json::parse(text.str());
  } catch (const json::parse_error& e) {
    throw Error(path, std::string("invalid JSON: ") + e.what());
  }
}

JsonReader::JsonReader(const json& obj, std::string where) : obj_(obj), where_(std::move(where)) {
  if (!obj_.is_object()) throw Error(where_, "must be a JSON object");
}

bool JsonReader::has(const std::string& key) const {
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
  if (!v.is_string()) throw Error(where(key), "must be a string, got " + v.dump());
  return v.get<std::string>();
}

double JsonReader::number(const std::string& key) {
  const json& v = require(key);
  if (!v.is_number()) throw Error(where(key), "must be a number, got " + v.dump());
  double x = v.get<double>();
  if (!std::isfinite(x)) throw Error(where(key), "must be finite");
  return x;
}

double JsonReader::positive(const std::string& key) {
  double x = number(key);
  if (!(x > 0)) throw Error(where(key), "must be positive, got " + obj_.at(key).dump());
  return x;
}

int64_t JsonReader::integer(const std::string& key) {
  const json& v = require(key);
  if (!v.is_number_integer()) throw Error(where(key), "must be an integer, got " + v.dump());
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
  if (!v.is_array()) throw Error(where(key), "must be a list, got " + v.dump());
  return v;
}

JsonReader JsonReader::object(const std::string& key) {
  const json& v = require(key);
  if (!v.is_object()) throw Error(where(key), "must be an object, got " + v.dump());
  return JsonReader(v, where(key));
}

void JsonReader::reject_unknown() const {
  for (const auto& [key, _] : obj_.items())
    if (!read_.count(key)) throw Error(where(key), "unknown key");
}

}  // namespace moecomm::core
