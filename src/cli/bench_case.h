#pragma once
// One row of `moecomm bench`: a strategy trained for real on the ranks of mpirun,
// its phases timed per step, and the same steps replayed in the simulator on the profiled
// cluster with the routing the run had, so measured and predicted phases line up.
#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/bench_ops.h"
#include "core/cluster.h"
#include "rt/link_bytes.h"
#include "rt/train_loop.h"
#include "sim/simulator.h"

namespace moecomm::cli {

// Milliseconds per step: wall time with a token-path collective in flight in the forward
// and in the backward, with a gradient AllReduce in flight (means over ranks), and the step
// from the forward's start to the gradients synced (the slowest rank; no optimizer step).
struct BenchPhases {
  double token_fwd_ms = 0, token_bwd_ms = 0, grad_sync_ms = 0, step_ms = 0;
  double token_ms() const { return token_fwd_ms + token_bwd_ms; }
};

struct BenchCase {
  std::string name;                        // as asked (a strategy name or knobs)
  std::string strategy;                    // every knob (sched::to_string)
  std::vector<std::string> notes;          // knobs the planner chose, and why
  BenchPhases measured;                    // medians over the measured steps
  BenchPhases measured_p25, measured_p75;  // their quartiles: how much the steps vary
  BenchPhases simulated;                   // the simulator on the profiled cluster
  rt::LinkBytes token_bytes;               // all ranks, the last step's token path
  rt::LinkBytes expert_bytes;              // all ranks, the last step's expert transfers (HybridEP)
  double grad_overlap_s = 0;  // per step, summed over ranks: AllReduce time beside an A2A
  float loss = 0;             // the last step's
  // With BenchSetup::trace, on rank 0: Chrome trace events of the last step, pid = rank
  // (cli/bench_trace.h), measured and as the simulator schedules it.
  nlohmann::json measured_trace = nlohmann::json::array();
  nlohmann::json simulated_trace = nlohmann::json::array();
  // Per op label, measured beside simulated (bench_ops.h).
  std::vector<OpComparison> ops;
};

struct BenchSetup {
  rt::TrainConfig train;     // model, parallel sizes, batch, seq_len, ranks per node, timeout
  std::string model_name;    // for the planner and the report
  std::string cluster_path;  // the profiled cluster (moecomm profile)
  core::Cluster cluster;
  int warmup = 2, steps = 5;
  std::optional<sim::Fairness> fairness;  // how the simulator shares a link; nullopt: the cluster's
  bool trace = false;  // keep the last step's calls and the simulated schedule (--trace)
};

// Collective over MPI_COMM_WORLD; the simulation runs on rank 0 (other ranks leave
// `simulated` zero). Throws Error naming --strategy for a strategy the runtime refuses.
BenchCase run_bench_case(const BenchSetup& setup, const std::string& strategy, int world);

}  // namespace moecomm::cli
