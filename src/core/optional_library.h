#pragma once
// The solver libraries a -DMOECOMM_PYTHON_ONLY=ON build may lack (CMakeLists.txt): the code
// that needs one is compiled out there (MOECOMM_HAVE_LEMON, MOECOMM_HAVE_CBC,
// MOECOMM_HAVE_NLOPT = 0) and asking for it throws this error, which names the library and
// the Debian package that brings it. The full build requires all three.
#include <string>

#include "core/error.h"

namespace moecomm::core {

enum class OptionalLibrary { kLemon, kCbc, kNlopt };

// "needs LEMON, which this build lacks (install liblemon-dev and rebuild)"
std::string missing_library_reason(OptionalLibrary library);

// Error(where, what + " " + missing_library_reason(library)), e.g.
// "place: solver 'lemon-ns' needs LEMON, which this build lacks (install liblemon-dev and
// rebuild)".
Error missing_library(const std::string& where, const std::string& what, OptionalLibrary library);

}  // namespace moecomm::core
