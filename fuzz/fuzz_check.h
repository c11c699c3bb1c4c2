#pragma once
// What every harness checks: a parser answers bad input with moecomm::Error (the CLI's
// "error: ..., exit 2"), nothing else. Any other exception escapes to libFuzzer, which reports
// it as a crash, as it does sanitizer findings.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>

#include "core/error.h"

namespace moecomm::fuzz {

// A property of accepted input that does not hold (a file we wrote does not read back).
[[noreturn]] inline void fail(const std::string& what) {
  std::fprintf(stderr, "fuzz property failed: %s\n", what.c_str());
  std::abort();
}

// f() on input that was accepted: an Error here is a finding, not an answer.
template <class F>
auto must(const char* what, F&& f) {
  try {
    return f();
  } catch (const Error& e) {
    fail(std::string(what) + ": " + e.what());
  }
}

// f() on arbitrary input: what it parsed, or nothing where it answered with an Error (the
// CLI's "error: ..., exit 2").
template <class F>
auto accepted(F&& f) -> std::optional<decltype(f())> {
  try {
    return f();
  } catch (const Error&) {
    return std::nullopt;
  }
}

inline std::string text_of(const uint8_t* data, size_t size) {
  return std::string(reinterpret_cast<const char*>(data), size);
}

}  // namespace moecomm::fuzz
