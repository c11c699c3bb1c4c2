#include "cli/flag_checks.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <exception>
#include <regex>
#include <string>

#include "core/error.h"

namespace moecomm::cli {

const CLI::Validator kFinite(
    [](std::string& text) {
      try {
        if (std::isfinite(std::stod(text))) return std::string();
      } catch (const std::exception&) {
      }
      return "'" + text + "' is not a finite number";
    },
    "FINITE");

CLI::Validator finite_range(double min, double max) {
  const CLI::Range range(min, max);
  return CLI::Validator(
      [range](std::string& text) {
        std::string error = kFinite(text);
        return error.empty() ? range(text) : error;
      },
      range.get_description());
}

int64_t parse_size(const std::string& text, const std::string& flag, int64_t max_bytes,
                   const std::string& max_text, bool zero_allowed) {
  static const std::regex form(R"(\s*([0-9]+(\.[0-9]+)?([eE][0-9]+)?)\s*([A-Za-z]*)\s*)");
  std::smatch m;
  const std::string why =
      "'" + text + "' is not a size (bytes, or a number with KB/MB/GB or K/M/G, KiB/MiB/GiB)";
  if (!std::regex_match(text, m, form)) throw Error(flag, why);
  std::string unit = m[4];
  std::transform(unit.begin(), unit.end(), unit.begin(),
                 [](unsigned char c) { return std::tolower(c); });
  double scale = 0;
  if (unit.empty() || unit == "b") scale = 1;
  if (unit == "kb") scale = 1e3;
  if (unit == "mb") scale = 1e6;
  if (unit == "gb") scale = 1e9;
  if (unit == "k" || unit == "kib") scale = 1 << 10;
  if (unit == "m" || unit == "mib") scale = 1 << 20;
  if (unit == "g" || unit == "gib") scale = 1 << 30;
  if (scale == 0) throw Error(flag, why);
  const double bytes = std::stod(m[1]) * scale;
  if (zero_allowed && bytes == 0) return 0;
  if (!(bytes >= 1 && bytes <= static_cast<double>(max_bytes)))
    throw Error(flag, "'" + text + "' must be between 1 byte and " + max_text);
  return static_cast<int64_t>(std::llround(bytes));
}

}  // namespace moecomm::cli
