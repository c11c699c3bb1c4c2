#pragma once
// `moecomm profile`: microbenchmarks of A2A, AllGather, ReduceScatter and AllReduce per level
// of the ranks of mpirun over a sweep of sizes (a table like nccl-tests'), and the device's
// GEMM and memcpy rates with every rank at work. Fits each level's bandwidth and latency and
// the efficiency curves (cost/profile_fit.h) and writes them as a cluster file that `plan`,
// `sim` and `train --cluster` accept. The measurement is rt/collective_profile.h and
// rt/device_profile.h; this is flags and output.
#include <CLI/CLI.hpp>

#include <iosfwd>
#include <string>
#include <vector>

namespace moecomm::cli {

class ProfileCommand {
 public:
  explicit ProfileCommand(CLI::App& app);
  bool selected() const { return sub_->parsed(); }
  int run(std::ostream& out, std::ostream& err) const;

 private:
  void add_layout_options();
  void add_sweep_options();
  void add_output_options();
  int profile(std::ostream& out, std::ostream& err) const;

  CLI::App* sub_;
  std::string min_bytes_ = "4KiB", max_bytes_ = "16MiB", out_ = "profiled-cluster.json", name_,
              table_out_, model_, traffic_bytes_ = "1MiB";
  double factor_ = 4, timeout_s_ = 60, model_seconds_ = 3;
  int ranks_per_node_ = 0, datacenters_ = 0, iters_ = 20, warmup_ = 2, gemm_size_ = 512, batch_ = 0,
      seq_len_ = 0;
  bool json_ = false;
  std::vector<std::string> nccl_tests_;  // --from-nccl-tests: fit these files, measure nothing
  std::string device_cluster_;
};

}  // namespace moecomm::cli
