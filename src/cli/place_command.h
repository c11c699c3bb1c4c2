#pragma once
// `moecomm place`: NetMoE sample placement on a routing trace, synthetic routing or one
// instance given as counts; traffic by level before and after, A2A time, samples moved,
// solve time.
#include <CLI/CLI.hpp>

#include <iosfwd>
#include <string>
#include <vector>

#include "core/cluster.h"
#include "place/routing_trace.h"
#include "place/synthetic_routing.h"

namespace moecomm::cli {

class PlaceCommand {
 public:
  explicit PlaceCommand(CLI::App& app);
  bool selected() const { return sub_->parsed(); }
  int run(std::ostream& out, std::ostream& err) const;

 private:
  // What a trace or synthetic run places, and where its model and layout came from: the
  // trace's own, a flag, or the defaults (printed, and in --json as model_from, layout_from).
  struct TraceInputs {
    place::RoutingTrace trace;
    std::string source;  // "trace FILE" or "synthetic routing (...)"
    std::string model_name, model_from;
    double bytes_per_token = 0;
    core::Cluster cluster;  // the layout placed on, with the links that price it
    std::string layout_from;
    std::vector<std::string> notes;  // one line each: where the model and the layout came from
  };

  int run_counts(std::ostream& out) const;
  int run_trace(std::ostream& out, std::ostream& err) const;
  TraceInputs recorded_inputs() const;
  TraceInputs synthetic_inputs(std::ostream& err) const;

  CLI::App* sub_;
  std::string trace_, counts_, write_trace_, cluster_ = "netmoe-a800-4x8",
                                             model_ = "netmoe-moe-gpt-s", solver_ = "flow";
  bool synthetic_ = false, json_ = false;
  place::SyntheticRoutingSpec spec_;
  // 0: derive from the cluster and model (NetMoE Table 3: I/J = 4, E/J = 2).
  int samples_per_device_ = 4, experts_per_device_ = 2;
  double decay_ = 0.5;
  CLI::Option *samples_opt_, *experts_opt_, *tokens_opt_, *top_k_opt_, *model_opt_, *cluster_opt_;
};

}  // namespace moecomm::cli
