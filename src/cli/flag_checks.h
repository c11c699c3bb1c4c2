#pragma once
// Validators of the commands' number flags beyond CLI11's own: CLI::Range lets NaN through
// (every comparison with it is false), so a double flag takes kFinite before its range.
#include <CLI/CLI.hpp>

namespace moecomm::cli {

extern const CLI::Validator kFinite;
// kFinite, then CLI::Range(min, max), shown in --help as the range alone ("FLOAT in [0 - 1]").
CLI::Validator finite_range(double min, double max);

}  // namespace moecomm::cli
