#pragma once
// The one exception type for bad user input (DESIGN.md "Conventions"): it says where
// (file, key) and why. The CLI prints "error: <what()>" and exits 2.
#include <stdexcept>
#include <string>

namespace moecomm {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& why) : std::runtime_error(why) {}
  // where: "cluster.json: levels[1].bandwidth_GBps"; why: "must be positive, got -3".
  Error(const std::string& where, const std::string& why)
      : std::runtime_error(where + ": " + why) {}
};

}  // namespace moecomm
