#pragma once
// What `moecomm bench` prints: measured phases beside the simulator's, per strategy, as a
// table, a JSON object and an SVG bar chart.
#include <iosfwd>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/bench_case.h"

namespace moecomm::cli {

struct BenchRun {
  int ranks = 0, ranks_per_node = 0, tp = 1, ep = 0;
  std::string model, cluster;
  int warmup = 0, steps = 0;
  std::vector<BenchCase> cases;  // the first is the reference the others are compared with
};

// Relative error of a prediction, (simulated - measured) / measured; 0 when both are 0.
double prediction_error(double measured, double simulated);

void print_bench_table(const BenchRun& run, std::ostream& out);
// Per strategy: each op label's measured and simulated mean time.
void print_op_table(const BenchRun& run, std::ostream& out);
nlohmann::json bench_json(const BenchRun& run);
// Grouped bars: per strategy and phase, measured beside simulated. Throws Error naming
// --svg when the file cannot be written.
void write_bench_svg(const BenchRun& run, const std::string& path);

}  // namespace moecomm::cli
