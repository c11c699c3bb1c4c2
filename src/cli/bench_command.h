#pragma once
// `moecomm bench`: trains the same model on the same data once per strategy on the
// ranks of mpirun (the emulated testbed: `moecomm testbed run -- moecomm bench ...`), times
// each phase per step, and prints it beside the simulator's prediction for the profiled
// cluster (`moecomm profile`), with an SVG chart of both.
#include <CLI/CLI.hpp>

#include <iosfwd>
#include <string>
#include <vector>

namespace moecomm::cli {

class BenchCommand {
 public:
  explicit BenchCommand(CLI::App& app);
  bool selected() const { return sub_->parsed(); }
  int run(std::ostream& out, std::ostream& err) const;

 private:
  int bench(std::ostream& out, std::ostream& err) const;

  CLI::App* sub_;
  std::string model_ = "testbed-moe-s", parallel_, cluster_, svg_, trace_, fairness_;
  std::vector<std::string> strategies_;
  int warmup_ = 2, steps_ = 5, batch_ = 0, seq_len_ = 0, ranks_per_node_ = 0, topics_ = 1;
  double timeout_s_ = 300;
  uint64_t seed_ = 1;
  bool json_ = false;
};

}  // namespace moecomm::cli
