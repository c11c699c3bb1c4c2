#pragma once
// `moecomm train`: trains a small MoE transformer LM across the ranks of mpirun (expert
// parallel experts, data parallel dense parameters) and reports the loss, step time and A2A
// bytes by link level per step; records the routing as a trace for `moecomm place`.
#include <CLI/CLI.hpp>

#include <iosfwd>
#include <string>
#include <vector>

#include "rt/train_loop.h"

namespace moecomm::cli {

class TrainCommand {
 public:
  explicit TrainCommand(CLI::App& app);
  bool selected() const { return sub_->parsed(); }
  int run(std::ostream& out, std::ostream& err) const;

 private:
  int train(std::ostream& out, std::ostream& err) const;
  rt::TrainConfig config(int world, std::vector<std::string>& notes, std::ostream& out) const;

  CLI::App* sub_;
  std::string model_ = "tiny", parallel_, cluster_, data_ = "synthetic", gate_ = "gshard",
              ffn_type_, renamed_expert_, a2a_ = "flat", strategy_, pp_schedule_,
              routing_trace_ = "routing-trace.json";
  int steps_ = 200, batch_ = 4, seq_len_ = 32, ranks_per_node_ = 0, log_every_ = 10;
  int text_order_ = 1, micro_batches_ = 0;  // 0: the model's micro_batches
  float lr_ = 3e-3f, capacity_factor_ = 0.0f, expert_spread_ = -1.0f;
  double timeout_s_ = 60;
  uint64_t seed_ = 1;
  bool json_ = false, bf16_ = false;
};

}  // namespace moecomm::cli
