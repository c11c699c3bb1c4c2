#pragma once
// The inputs of `moecomm infer`: the model (the `small` default, a preset or a JSON file) and
// the routing (a trace file, or synthetic skewed routing from `--synthetic`), checked against
// the flags and the number of ranks before anything is timed.
#include <string>
#include <vector>

#include "nn/moe_layer_factory.h"
#include "place/routing_trace.h"
#include "place/synthetic_routing.h"

namespace moecomm::cli {

// The flags as given; 0 means "the default" for the ints that have a derived one.
struct InferFlags {
  std::string model = "small", trace, synthetic;
  bool model_given = false;  // --model on the command line: it wins over a trace's own model
  int path_length = 0, max_per_device = 0, batches = 0, batch_samples = 0, profile_iterations = 0,
      ranks_per_node = 0, top_k = 0;
  double timeout_s = 60;
  bool json = false;
};

// Lina's evaluation uses paths of 3 experts (Sec. 7.3.2); a trace of fewer layers caps it.
inline constexpr int kDefaultPathLength = 3;

struct InferModel {
  std::string name;
  int hidden = 128, ffn_hidden = 512, experts = 16, top_k = 1;
  core::FfnType ffn_type = core::FfnType::kGelu;
};

// The validated inputs, defaults resolved.
struct InferInputs {
  InferModel model;           // with --trace, the trace's experts and top_k
  place::RoutingTrace trace;  // the file's, or generated from `synthetic`
  std::string trace_file;     // empty: synthetic routing
  place::SyntheticRoutingSpec synthetic;
  int ranks = 1, path_length = 3, max_per_device = 0, profile_iterations = 0, batch_samples = 0,
      batch_tokens = 0, max_batches = 0, ranks_per_node = 0;
  double timeout_s = 60;
  // Where the model's shape and the ranks per node came from: "trace", the flag ("--model",
  // "--ranks-per-node") or "default"; and one line each saying so, for the table.
  std::string model_from = "default", layout_from = "default";
  std::vector<std::string> notes;

  int layers() const { return trace.layers(); }
  int iterations() const { return static_cast<int>(trace.iterations.size()); }
};

// Throws moecomm::Error naming the flag at fault.
InferInputs load_infer_inputs(const InferFlags& flags, int ranks);

}  // namespace moecomm::cli
