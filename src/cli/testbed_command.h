#pragma once
// `moecomm testbed`: an emulated multi-node, multi-datacenter cluster on one Linux machine
// (network namespaces joined by shaped links), to run MPI programs such as `moecomm train`
// across "nodes" whose links have a set bandwidth. Subcommands up, run, down, status; the
// work is in src/testbed/.
#include <CLI/CLI.hpp>

#include <iosfwd>
#include <string>
#include <vector>

#include "testbed/testbed.h"

namespace moecomm::cli {

class TestbedCommand {
 public:
  explicit TestbedCommand(CLI::App& app);
  bool selected() const { return sub_->parsed(); }
  int run(std::ostream& out, std::ostream& err) const;

 private:
  void add_up();
  void add_run();
  void add_down();
  void add_status();
  int up(std::ostream& out) const;

  CLI::App *sub_, *up_, *run_, *down_, *status_;
  std::string name_ = testbed::kDefaultName;
  int nodes_ = 0, ranks_per_node_ = 0, datacenters_ = 1, np_ = 0;
  std::string node_link_, dc_link_;
  double timeout_s_ = testbed::kDefaultRunTimeout;
  std::vector<std::string> command_;
  bool json_ = false;
};

}  // namespace moecomm::cli
