#include "cli/testbed_command.h"

#include <ostream>

#include "cli/flag_checks.h"
#include "testbed/link_spec.h"
#include "testbed/testbed.h"

namespace moecomm::cli {

namespace {

constexpr const char* kNameHelp =
    "testbed name (letters, digits, '_', '-'); every namespace it makes is called "
    "mctb-<name>-...";

}  // namespace

TestbedCommand::TestbedCommand(CLI::App& app) {
  sub_ = app.add_subcommand(
      "testbed",
      "An emulated cluster on this machine: N nodes (network namespaces) in D datacenters,\n"
      "joined by links shaped to a set rate, to run MPI programs (e.g. moecomm train) across\n"
      "nodes. Needs root. up builds it, run runs a program on it under mpirun, status shows\n"
      "it, down removes it (and everything running in it).");
  sub_->require_subcommand(1);
  add_up();
  add_run();
  add_down();
  add_status();
}

void TestbedCommand::add_up() {
  up_ = sub_->add_subcommand(
      "up",
      "Build a testbed: a namespace per node (host nodeK, address 10.213.0.K+1), each joined\n"
      "to its datacenter's bridge by a link shaped to --node-link both ways; with\n"
      "--datacenters > 1 the datacenters' bridges are joined by links shaped to --dc-link.");
  up_->add_option("--name", name_, kNameHelp)->capture_default_str();
  up_->add_option("--nodes", nodes_, "emulated nodes (1 to 1000)")->required();
  up_->add_option("--ranks-per-node", ranks_per_node_,
                  "MPI ranks per node (the hostfile's slots; run's default -np is nodes x this)")
      ->required();
  up_->add_option("--node-link", node_link_,
                  "each node's link: RATE[,LATENCY]; RATE as tc writes it, bit = bits/s, "
                  "Bps = bytes/s, decimal prefixes (200mbit, 1gbit, 25MBps, 1.5GBps); LATENCY "
                  "(5ms, 100us) one way between two nodes, needs the netem qdisc")
      ->required();
  up_->add_option("--datacenters", datacenters_,
                  "datacenters; must divide --nodes, which fill them in order")
      ->capture_default_str();
  up_->add_option("--dc-link", dc_link_,
                  "each datacenter's link to the others: RATE[,LATENCY] as --node-link "
                  "(required with --datacenters > 1)");
}

void TestbedCommand::add_run() {
  run_ = sub_->add_subcommand(
      "run",
      "Run PROGRAM under mpirun across the testbed's nodes (mpirun itself in node 0): ranks\n"
      "fill node 0, then node 1, ...; ranks of a node share memory, nodes talk TCP over the\n"
      "shaped links. The ranks see MOECOMM_TESTBED_NODES, _RANKS_PER_NODE, _DATACENTERS,\n"
      "_NODE_LINK_BPS and _DC_LINK_BPS (bytes/s). Exits with PROGRAM's status. Put -- before\n"
      "PROGRAM: moecomm testbed run [--name NAME] [--np P] -- PROGRAM ARGS...");
  run_->add_option("--name", name_, kNameHelp)->capture_default_str();
  run_->add_option("--np", np_, "MPI ranks (default: nodes x ranks per node)")
      ->check(CLI::Range(1, 1 << 20));
  run_->add_option("--timeout", timeout_s_,
                   "seconds after which PROGRAM, mpirun and everything they started are killed")
      ->capture_default_str()
      ->check(finite_range(0.001, 1e7));
  // Not ->required(): the library's error says how to give one.
  run_->add_option("command", command_, "the program and its arguments (after --)");
}

void TestbedCommand::add_down() {
  down_ = sub_->add_subcommand(
      "down",
      "Remove a testbed: kill every process in its namespaces, delete the namespaces (with\n"
      "their links and bridges) and its state. Safe to repeat; also cleans up after a\n"
      "half-made testbed or a killed run.");
  down_->add_option("--name", name_, kNameHelp)->capture_default_str();
}

void TestbedCommand::add_status() {
  status_ = sub_->add_subcommand("status",
                                 "Show a testbed's layout and check that its namespaces exist.");
  status_->add_option("--name", name_, kNameHelp)->capture_default_str();
  status_->add_flag("--json", json_, "print one JSON object (the state plus namespace checks)");
}

int TestbedCommand::up(std::ostream& out) const {
  testbed::TestbedSpec spec;
  spec.name = name_;
  spec.nodes = nodes_;
  spec.ranks_per_node = ranks_per_node_;
  spec.datacenters = datacenters_;
  spec.node_link = testbed::parse_link(node_link_, "--node-link");
  if (!dc_link_.empty()) spec.dc_link = testbed::parse_link(dc_link_, "--dc-link");
  testbed::up(spec, out);
  return 0;
}

int TestbedCommand::run(std::ostream& out, std::ostream& err) const {
  if (up_->parsed()) return up(out);
  if (run_->parsed()) {
    testbed::RunRequest request;
    request.name = name_;
    request.np = np_;
    request.timeout_s = timeout_s_;
    request.command = command_;
    return testbed::run(request, out, err);
  }
  if (down_->parsed()) {
    testbed::down(name_, out);
    return 0;
  }
  const nlohmann::json status = testbed::status(name_);
  if (json_) {
    out << status.dump(2) << "\n";
  } else {
    testbed::print_status(status, out);
  }
  return 0;
}

}  // namespace moecomm::cli
