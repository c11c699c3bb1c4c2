#include "core/optional_library.h"

namespace moecomm::core {

std::string missing_library_reason(OptionalLibrary library) {
  switch (library) {
    case OptionalLibrary::kLemon:
      return "needs LEMON, which this build lacks (install liblemon-dev and rebuild)";
    case OptionalLibrary::kCbc:
      return "needs COIN-OR CBC, which this build lacks (install coinor-libcbc-dev and rebuild)";
    case OptionalLibrary::kNlopt:
      return "needs NLopt, which this build lacks (install libnlopt-cxx-dev and rebuild)";
  }
  return "needs a library this build lacks";
}

Error missing_library(const std::string& where, const std::string& what, OptionalLibrary library) {
  return Error(where, what + " " + missing_library_reason(library));
}

}  // namespace moecomm::core
