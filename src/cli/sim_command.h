#pragma once
// `moecomm sim`: builds one training step of a strategy as a schedule and runs it in the
// flow-level simulator; optional Chrome trace and SVG timeline.
#include <CLI/CLI.hpp>

#include <iosfwd>
#include <string>

#include "sim/simulator.h"

namespace moecomm::cli {

class SimCommand {
 public:
  explicit SimCommand(CLI::App& app);
  bool selected() const { return sub_->parsed(); }
  int run(std::ostream& out, std::ostream& err) const;

 private:
  CLI::App* sub_;
  std::string model_, cluster_, parallel_, strategy_ = "baseline", trace_, svg_, ranks_, fairness_,
                                           routing_ = "auto";
  double locality_ = 0.9;
  int layers_ = 0;            // 0: one per stage and virtual stage
  int64_t micro_batches_ = 0;  // 0: the model's
  std::string pp_schedule_;    // empty: the strategy's
  int zero_ = -1;              // -1: the strategy's
  bool whole_step_ = false;
  int64_t seq_len_ = 0, micro_batch_ = 0;  // 0: the model's
  double compute_efficiency_ = 0;          // 0: the device's
  double completion_tolerance_ = sim::SimOptions{}.completion_tolerance;
  bool json_ = false;
  // Collective mode: one collective over a sweep of sizes, as nccl-tests reports it.
  std::string collective_, sizes_ = "1M:4G", group_;
  int run_collective(std::ostream& out) const;
};

}  // namespace moecomm::cli
