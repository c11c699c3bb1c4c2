#include "cli/flag_checks.h"

#include <cmath>
#include <exception>
#include <string>

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

}  // namespace moecomm::cli
