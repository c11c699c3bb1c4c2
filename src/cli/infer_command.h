#pragma once
// `moecomm infer`: Lina's popularity-aware MoE inference (lina.txt Sec. 5.2, 6.2, 7.3),
// measured. A routing trace (a file, or synthetic skewed routing) is split in two: its first
// iterations profile the expert paths (Sec. 5.2), the rest are replayed batch by batch
// through a real ReplicatedMoeLayer on the ranks of mpirun, once per variant: baseline
// (plain EP), Lina without estimation, Lina without fine-tuning, Lina, and Ideal (a
// perfectly balanced routing, Sec. 7.3.1). Reports the median and 95th-percentile MoE layer
// time per layer and overall, their ratio to Ideal (Fig. 16, Table 5) and the estimation
// accuracy (Sec. 7.3.2). The parts: infer_inputs (model and routing), infer_replay (the
// measurement), infer_report (table and JSON).
#include <CLI/CLI.hpp>

#include <iosfwd>

#include "cli/infer_inputs.h"

namespace moecomm::cli {

class InferCommand {
 public:
  explicit InferCommand(CLI::App& app);
  bool selected() const { return sub_->parsed(); }
  int run(std::ostream& out, std::ostream& err) const;

 private:
  void add_input_options();
  void add_run_options();
  int infer(std::ostream& out, std::ostream& err) const;

  CLI::App* sub_;
  InferFlags flags_;
};

}  // namespace moecomm::cli
