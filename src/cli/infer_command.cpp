#include "cli/infer_command.h"

#include <cmath>
#include <optional>
#include <ostream>
#include <string>

#include "cli/infer_replay.h"
#include "cli/infer_report.h"
#include "cli/json_output.h"
#include "cli/mpi_command.h"
#include "core/error.h"
#include "rt/mpi_base.h"

namespace moecomm::cli {

InferCommand::InferCommand(CLI::App& app) {
  sub_ = app.add_subcommand(
      "infer",
      "Lina popularity-aware MoE inference, measured: profile expert paths on the first part\n"
      "of a routing trace, then replay the rest batch by batch through a real replicated MoE\n"
      "layer on the ranks of mpirun for five variants (baseline EP, Lina without estimation,\n"
      "Lina without fine-tuning, Lina, Ideal = perfectly balanced routing). Prints median\n"
      "and p95 MoE layer time per layer and overall, the ratio to Ideal, and the estimation\n"
      "accuracy. Run as: mpirun -np P moecomm infer [...]");
  add_input_options();
  add_run_options();
}

// The model and the routing.
void InferCommand::add_input_options() {
  sub_->add_option("--model", flags_.model,
                   "small (hidden 128, ffn 512, 16 experts, top-1), or a model preset or JSON "
                   "file (its hidden, ffn_hidden, experts, top_k, ffn_type); with --trace the "
                   "experts and top_k are the trace's, and by default the shape too when the "
                   "trace records one")
      ->capture_default_str();
  auto* trace = sub_->add_option("--trace", flags_.trace,
                                 "routing trace file (format: README, 'Routing trace'), e.g. "
                                 "the one `moecomm train` writes")
                    ->check(CLI::ExistingFile);
  sub_->add_option("--synthetic", flags_.synthetic,
                   "synthetic skewed routing (the default): key=value,... over skew=1 (Zipf "
                   "exponent of expert popularity, 0 = uniform), locality=0.5, correlation=0.8 "
                   "(layer to layer), preferred=2, layers=8, samples=8, tokens=128, "
                   "iterations=48, seed=1")
      ->excludes(trace);
  sub_->add_option("--top-k", flags_.top_k,
                   "experts per token for synthetic routing (default: model's)")
      ->check(CLI::Range(1, 1000000));
  sub_->add_option("--path-length", flags_.path_length,
                   "l: experts of a token's path that select its profiled distribution (Eq. 1); "
                   "default 3, or the layers - 1 when fewer")
      ->check(CLI::Range(1, 4096));
}

// Placement, profiling, batching, the job and the output.
void InferCommand::add_run_options() {
  sub_->add_option("--max-experts-per-device", flags_.max_per_device,
                   "experts a rank may host at once (Lina Sec. 6.2; default 4, or E/P when "
                   "larger)")
      ->check(CLI::Range(1, 1000000));
  sub_->add_option("--profile-iterations", flags_.profile_iterations,
                   "trace iterations used for profiling (default: the first three quarters); "
                   "the rest are evaluated")
      ->check(CLI::Range(1, 1000000));
  sub_->add_option("--batch-samples", flags_.batch_samples,
                   "samples per inference batch (default: all samples of an iteration)")
      ->check(CLI::Range(1, 1 << 20));
  sub_->add_option("--batches", flags_.batches, "evaluate at most this many batches (default: all)")
      ->check(CLI::Range(1, 1000000));
  sub_->add_option("--ranks-per-node", flags_.ranks_per_node,
                   "ranks per node, for the bytes by link level (default: the trace's own when "
                   "it was recorded on as many ranks, else all on one node)")
      ->check(CLI::Range(0, 1 << 20));
  sub_->add_option("--timeout", flags_.timeout_s,
                   "seconds a collective may stall before the job fails")
      ->check(kFinite)
      ->capture_default_str()
      ->check(CLI::Range(0.1, 86400.0));
  sub_->add_flag("--json", flags_.json,
                 "print one JSON object: {overall: {VARIANT: {median_ms, p95_ms, "
                 "median_vs_ideal, p95_vs_ideal}}, layers: [...], accuracy: {...}, ...}");
}

int InferCommand::run(std::ostream& out, std::ostream& err) const {
  return run_under_mpi(err, [&] { return infer(out, err); });
}

int InferCommand::infer(std::ostream& out, std::ostream& err) const {
  const int me = mpi_world_rank();
  InferFlags flags = flags_;
  flags.model_given = sub_->count("--model") > 0;
  // Every rank reads the same flags and files, so all fail alike: one message, one status.
  std::optional<InferInputs> loaded;
  std::string error;
  try {
    loaded = load_infer_inputs(flags, mpi_world_size());
  } catch (const Error& e) {
    error = e.what();
  }
  if (!all_ranks_accept(error, err)) return 2;
  const InferInputs& in = *loaded;
  InferReplay replay(in, me);
  if (me == 0 && !flags_.json) print_infer_header(out, in, replay.batch_count());
  const InferReplayResult result = replay.run(err);
  if (me != 0) return 0;
  const nlohmann::json report = infer_json(in, result);
  if (flags_.json)
    out << dump_json(report, -1) << "\n";
  else
    print_infer_tables(out, in, report);
  return 0;
}

}  // namespace moecomm::cli
