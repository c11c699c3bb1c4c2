#pragma once
// Runs the moecomm command line in-process, capturing its output, for the CLI tests.
#include <sstream>
#include <string>
#include <vector>

#include "cli/app.h"

namespace moecomm::cli::testing {

struct Result {
  int code;
  std::string out, err;
};

inline Result run_cli(std::vector<std::string> args) {
  std::ostringstream out, err;
  const int code = run(args, out, err);
  return {code, out.str(), err.str()};
}

inline bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

}  // namespace moecomm::cli::testing
