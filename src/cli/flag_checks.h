#pragma once
// Validators of the commands' number flags beyond CLI11's own: CLI::Range lets NaN through
// (every comparison with it is false), so a double flag takes kFinite before its range.
#include <CLI/CLI.hpp>

namespace moecomm::cli {

extern const CLI::Validator kFinite;

}  // namespace moecomm::cli
