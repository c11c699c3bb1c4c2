#pragma once
// `moecomm place`: NetMoE sample placement on a routing trace, synthetic routing or one
// instance given as counts; traffic by level before and after, A2A time, samples moved,
// solve time.
#include <CLI/CLI.hpp>

#include <iosfwd>
#include <string>

#include "place/synthetic_routing.h"

namespace moecomm::cli {

class PlaceCommand {
 public:
  explicit PlaceCommand(CLI::App& app);
  bool selected() const { return sub_->parsed(); }
  int run(std::ostream& out, std::ostream& err) const;

 private:
  int run_counts(std::ostream& out) const;
  int run_trace(std::ostream& out, std::ostream& err) const;

  CLI::App* sub_;
  std::string trace_, counts_, write_trace_, cluster_ = "netmoe-a800-4x8",
                                             model_ = "netmoe-moe-gpt-s", solver_ = "flow";
  bool synthetic_ = false, json_ = false;
  place::SyntheticRoutingSpec spec_;
  // 0: derive from the cluster and model (NetMoE Table 3: I/J = 4, E/J = 2).
  int samples_per_device_ = 4, experts_per_device_ = 2;
  double decay_ = 0.5;
  CLI::Option *samples_opt_, *experts_opt_, *tokens_opt_, *top_k_opt_;
};

}  // namespace moecomm::cli
