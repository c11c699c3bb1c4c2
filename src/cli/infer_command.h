#pragma once
// `moecomm infer`: Lina's popularity-aware MoE inference (lina.txt Sec. 5.2, 6.2, 7.3),
// measured. A routing trace (a file, or synthetic skewed routing) is split in two: its first
// iterations profile the expert paths (Sec. 5.2), the rest are replayed batch by batch
// through a real ReplicatedMoeLayer on the ranks of mpirun, once per variant: baseline
// (plain EP), Lina without estimation, Lina without fine-tuning, Lina, and Ideal (a
// perfectly balanced routing, Sec. 7.3.1). Reports the median and 95th-percentile MoE layer
// time per layer and overall, their ratio to Ideal (Fig. 16, Table 5) and the estimation
// accuracy (Sec. 7.3.2).
#include <CLI/CLI.hpp>

#include <cstdint>
#include <iosfwd>
#include <string>

namespace moecomm::cli {

class InferCommand {
 public:
  explicit InferCommand(CLI::App& app);
  bool selected() const { return sub_->parsed(); }
  int run(std::ostream& out, std::ostream& err) const;

 private:
  int infer(std::ostream& out, std::ostream& err) const;

  CLI::App* sub_;
  std::string model_ = "small", trace_, synthetic_;
  int path_length_ = 3, max_per_device_ = 0, batches_ = 0, batch_samples_ = 0,
      profile_iterations_ = 0, ranks_per_node_ = 0, top_k_ = 0;
  double timeout_s_ = 60;
  bool json_ = false;
};

}  // namespace moecomm::cli
