#pragma once
// Validators of the commands' number flags beyond CLI11's own: CLI::Range lets NaN through
// (every comparison with it is false), so a double flag takes kFinite before its range.
#include <CLI/CLI.hpp>

#include <cstdint>
#include <string>

namespace moecomm::cli {

extern const CLI::Validator kFinite;
// kFinite, then CLI::Range(min, max), shown in --help as the range alone ("FLOAT in [0 - 1]").
CLI::Validator finite_range(double min, double max);

// "64KiB", "4KB", "16M", "1048576": bytes (K/M/G and KiB/MiB/GiB are powers of 1024, as
// nccl-tests' -b and -e read them; KB/MB/GB powers of 1000). Throws Error naming `flag`
// outside [1, max_bytes] (max_text says max_bytes to the user); 0 only where `zero_allowed`
// (it turns a thing off).
int64_t parse_size(const std::string& text, const std::string& flag, int64_t max_bytes,
                   const std::string& max_text, bool zero_allowed = false);

}  // namespace moecomm::cli
