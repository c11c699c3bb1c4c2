#pragma once
// The report of `moecomm infer`: the opening lines (what is measured), then the JSON object
// of `--json` or the text tables, both from the replay's InferReplayResult. Medians and 95th
// percentiles per layer and overall, their ratio to Ideal (Lina Fig. 16, Table 5) and the
// estimation accuracy (Sec. 7.3.2). Rank 0 only.
#include <iosfwd>
#include <nlohmann/json.hpp>

#include "cli/infer_inputs.h"
#include "cli/infer_replay.h"

namespace moecomm::cli {

// The model, the routing and what is profiled and evaluated.
void print_infer_header(std::ostream& out, const InferInputs& in, size_t batches);

// The `--json` object (README, `moecomm infer`).
nlohmann::json infer_json(const InferInputs& in, const InferReplayResult& r);

// The text tables, from infer_json's object.
void print_infer_tables(std::ostream& out, const InferInputs& in, const nlohmann::json& report);

}  // namespace moecomm::cli
