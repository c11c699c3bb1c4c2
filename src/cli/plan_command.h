#pragma once
// `moecomm plan`: every method's knobs seeded by its paper's model, priced by the simulator,
// a search around them, and the simulated best as the recommendation.
#include <CLI/CLI.hpp>

#include <cstdint>
#include <iosfwd>
#include <string>

namespace moecomm::cli {

class PlanCommand {
 public:
  explicit PlanCommand(CLI::App& app);
  bool selected() const { return sub_->parsed(); }
  int run(std::ostream& out, std::ostream& err) const;

 private:
  CLI::App* sub_;
  std::string model_, cluster_, parallel_, recompute_ = "selective";
  int64_t seq_len_ = 0, micro_batch_ = 0;
  int zero_ = 1, layers_ = 1, max_layouts_;
  int64_t global_batch_ = 0;
  double budget_s_;
  bool json_ = false, search_layout_ = false;
};

}  // namespace moecomm::cli
