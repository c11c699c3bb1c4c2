#include "core/optional_library.h"

#include <gtest/gtest.h>

namespace moecomm::core {
namespace {

TEST(OptionalLibrary, NamesTheLibraryAndItsDebianPackage) {
  EXPECT_EQ(missing_library_reason(OptionalLibrary::kLemon),
            "needs LEMON, which this build lacks (install liblemon-dev and rebuild)");
  EXPECT_EQ(missing_library_reason(OptionalLibrary::kCbc),
            "needs COIN-OR CBC, which this build lacks (install coinor-libcbc-dev and rebuild)");
  EXPECT_EQ(missing_library_reason(OptionalLibrary::kNlopt),
            "needs NLopt, which this build lacks (install libnlopt-cxx-dev and rebuild)");
}

TEST(OptionalLibrary, ErrorSaysWhereAndWhat) {
  const Error e = missing_library("place", "solver 'lemon-ns'", OptionalLibrary::kLemon);
  EXPECT_STREQ(e.what(),
               "place: solver 'lemon-ns' needs LEMON, which this build lacks (install "
               "liblemon-dev and rebuild)");
}

}  // namespace
}  // namespace moecomm::core
