#pragma once
// Runs f, expects it to throw moecomm::Error, returns the message ("" and a test failure
// otherwise) so tests can check that the error names the file, the key and the reason.
#include <gtest/gtest.h>

#include <string>

#include "core/error.h"

namespace moecomm::testing {

template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const moecomm::Error& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "threw a non-moecomm exception: " << e.what();
    return "";
  }
  ADD_FAILURE() << "did not throw";
  return "";
}

}  // namespace moecomm::testing

#define EXPECT_ERROR_HAS(stmt, ...)                                                  \
  do {                                                                               \
    std::string msg_ = ::moecomm::testing::error_of([&] { stmt; });                  \
    for (const std::string& part_ : std::initializer_list<std::string>{__VA_ARGS__}) \
      EXPECT_NE(msg_.find(part_), std::string::npos)                                 \
          << "message: " << msg_ << "\nexpected to contain: " << part_;              \
  } while (0)
