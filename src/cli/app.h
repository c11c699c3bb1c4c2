#pragma once
// Entry point of the `moecomm` command, callable from tests with an argv.
#include <iosfwd>
#include <string>
#include <vector>

namespace moecomm::cli {

// Parses argv, runs the subcommand; user errors print "error: ..." to stderr and return 2.
int run(int argc, char** argv);
// Same with explicit streams, for tests.
int run(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

}  // namespace moecomm::cli
