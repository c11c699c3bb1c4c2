#pragma once
// `moecomm plan`: the analytical planner's table of strategies and its recommendation.
#include <CLI/CLI.hpp>

#include <cstdint>
#include <iosfwd>
#include <string>

namespace moecomm::cli {

class PlanCommand {
 public:
  explicit PlanCommand(CLI::App& app);
  bool selected() const { return sub_->parsed(); }
  int run(std::ostream& out) const;

 private:
  CLI::App* sub_;
  std::string model_, cluster_, parallel_, recompute_ = "selective";
  int64_t seq_len_ = 0, micro_batch_ = 0;
  int zero_stage_ = 1;
  bool json_ = false;
};

}  // namespace moecomm::cli
