#pragma once
// `moecomm testbed`: an emulated multi-node (and multi-datacenter) cluster on one Linux
// machine, for running MPI programs across "nodes" whose links have a set bandwidth.
// Each node is a network namespace; links are shaped veth pairs into bridges of a fabric
// namespace (testbed_spec.h: names and addresses; setup_commands.h: the commands;
// launch_files.h: how mpirun reaches the nodes). Needs root.
#include <iosfwd>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "testbed/testbed_spec.h"

namespace moecomm::testbed {

inline constexpr double kDefaultRunTimeout = 3600;

// Builds the testbed and writes its state directory (state.json, hostfile, agent.sh).
// Refuses when a testbed of that name exists; a failure part-way removes what was made.
void up(const TestbedSpec& spec, std::ostream& out);

struct RunRequest {
  std::string name = kDefaultName;
  int np = 0;  // 0: nodes x ranks per node
  double timeout_s = kDefaultRunTimeout;
  std::vector<std::string> command;
};

// Runs the command under mpirun across the testbed's nodes, its output streamed to out/err;
// returns its exit status. Throws Error when it runs past the time limit (after stopping it
// and everything it started).
int run(const RunRequest& request, std::ostream& out, std::ostream& err);

// Kills every process in the testbed's namespaces, deletes them (and with them its links and
// bridges) and its state directory. Also removes the leftovers of a half-made testbed whose
// state is gone; nothing there is not an error.
void down(const std::string& name, std::ostream& out);

// The layout and whether each namespace exists (and how many processes it holds, when we may
// look). Throws Error when no testbed of that name exists.
nlohmann::json status(const std::string& name);
void print_status(const nlohmann::json& status, std::ostream& out);

}  // namespace moecomm::testbed
