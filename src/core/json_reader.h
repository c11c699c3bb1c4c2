#pragma once
// Strict reading of user JSON files: every error names the file and the key path
// ("cluster.json: levels[1].bandwidth_GBps: must be positive"), unknown keys are
// rejected (a typo must not silently fall back to a default).
#include <cstdint>
#include <optional>
#include <set>
#include <string>

#include <nlohmann/json.hpp>

namespace moecomm::core {

// Parses a JSON file; throws Error naming the file on I/O or syntax errors.
nlohmann::json read_json_file(const std::string& path);
// Parses JSON text read from `where` (a file name); throws Error naming it on syntax errors.
nlohmann::json parse_json_text(const std::string& text, const std::string& where);

// The stated range of a rate, size or count in a user file: values outside it are typos or
// unit slips, and inside it every derived time and size stays finite and meaningful.
struct Range {
  double min = 0;
  double max = 0;
  const char* meaning = "";  // the range in words, with its unit ("1 kB/s to 1 PB/s")
};

class JsonReader {
 public:
  // where: the file and key path of `obj`, e.g. "a.json" or "a.json: device".
  JsonReader(const nlohmann::json& obj, std::string where);

  // Whether the object has `key`; the key counts as one the reader knows (a near miss of it
  // is suggested for an unknown key).
  bool has(const std::string& key) const;
  std::string where(const std::string& key) const;

  std::string string(const std::string& key);
  double number(const std::string& key);
  bool boolean(const std::string& key);                         // true or false
  double positive(const std::string& key);                      // > 0
  double positive(const std::string& key, double max);          // in (0, max]
  double in_range(const std::string& key, const Range& range);  // in [min, max]
  int64_t integer(const std::string& key);
  int64_t positive_int(const std::string& key);                     // >= 1
  int64_t positive_int(const std::string& key, int64_t max);        // in [1, max]
  std::optional<double> nullable_positive(const std::string& key);  // number > 0 or null
  const nlohmann::json& array(const std::string& key);
  JsonReader object(const std::string& key);
  // The value, of any type; marks the key as read.
  const nlohmann::json& value(const std::string& key);

  // Throws on the first key that was never read, with the near miss among the keys read or
  // asked about ("unknown key; did you mean 'bandwidth_GBps'?").
  void reject_unknown() const;

 private:
  const nlohmann::json& require(const std::string& key);

  const nlohmann::json& obj_;
  std::string where_;
  std::set<std::string> read_;
  mutable std::set<std::string> asked_;  // keys has() was asked about
};

}  // namespace moecomm::core
