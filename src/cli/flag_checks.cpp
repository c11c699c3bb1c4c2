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

}  // namespace moecomm::cli
