#pragma once
// Runs one program on this machine (fork + exec, no shell), with its output captured or
// streamed, its exit status, and an optional time limit after which the program and every
// process it started are killed, so that no caller ever waits forever.
#include <iosfwd>
#include <string>
#include <utility>
#include <vector>

namespace moecomm::testbed {

struct CommandOptions {
  double timeout_s = 0;         // 0: no limit
  std::ostream* out = nullptr;  // stream stdout here as it comes; nullptr: capture it
  std::ostream* err = nullptr;  // the same for stderr
  std::vector<std::pair<std::string, std::string>> env;  // set on top of our environment
  bool inherit_stdin = false;                            // else stdin is /dev/null
  // A process group of its own (so a terminal's Ctrl-C does not reach it); a command the user
  // watches stays in ours, so that Ctrl-C stops it and it may read the terminal.
  bool own_process_group = true;
  // Signal the program gets when this process dies (0: none): a launcher must not outlive us.
  int parent_death_signal = 0;
};

struct CommandResult {
  int status = 0;          // exit code, or 128 + signal when killed by one
  bool timed_out = false;  // killed at the time limit
  std::string out, err;    // what was captured (empty where streamed)
};

// Throws moecomm::Error when the program cannot be started (not found, not executable).
CommandResult run_command(const std::vector<std::string>& argv, const CommandOptions& options = {});

// The full path of `program` found on $PATH (or as given when it has a '/'); "" if none.
std::string find_program(const std::string& program);

// The command line as a shell would read it back, for messages: ip netns add 'a b'.
std::string shell_quote(const std::vector<std::string>& argv);

}  // namespace moecomm::testbed
