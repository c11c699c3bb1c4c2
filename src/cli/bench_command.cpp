#include "cli/bench_command.h"

#include <fstream>
#include <ostream>

#include "cli/bench_report.h"
#include "cli/bench_trace.h"
#include "cli/json_output.h"
#include "cli/mpi_command.h"
#include "cli/train_model.h"
#include "cli/train_strategy.h"
#include "core/error.h"
#include "core/presets.h"

namespace moecomm::cli {

namespace {

// What each run compares by default: the paper methods that apply to the parallel layout
// (MoNTA needs tensor parallelism, NetMoE runs without it), the baseline first.
std::vector<std::string> default_strategies(int tp) {
  if (tp > 1) return {"baseline", "hier-a2a", "monta-o1", "monta-o2", "monta-o3", "fsmoe", "lina"};
  return {"baseline", "hier-a2a", "netmoe", "fsmoe", "lina"};
}

// --ranks-per-node, else the testbed's (moecomm testbed run exports it), else one node.
int ranks_per_node(int flag, int world) {
  if (flag > 0) return flag;
  const int testbed = testbed_env_int("MOECOMM_TESTBED_RANKS_PER_NODE");
  return testbed > 0 ? testbed : world;
}

// The simulator must see the machine the ranks run on: as many devices, as many per node.
void check_cluster(const core::Cluster& cluster, const std::string& where, int world,
                   int per_node) {
  if (cluster.world_size() != world)
    throw Error(where, "has " + std::to_string(cluster.world_size()) + " devices, the job " +
                           std::to_string(world) + " ranks");
  if (cluster.levels.back().count != per_node)
    throw Error(where, "has " + std::to_string(cluster.levels.back().count) +
                           " devices per node, the job " + std::to_string(per_node) +
                           " ranks per node (--ranks-per-node)");
}

}  // namespace

BenchCommand::BenchCommand(CLI::App& app) {
  sub_ = app.add_subcommand(
      "bench",
      "Train the same model on the same data once per strategy on the ranks of mpirun, time\n"
      "each phase per step (token path forward and backward, gradient AllReduce, the step)\n"
      "and print it beside the simulator's prediction for a profiled cluster. Run on the\n"
      "emulated testbed: moecomm testbed run -- moecomm bench --cluster profiled.json");
  sub_->add_option("--cluster", cluster_,
                   "the machine's cluster file, as `moecomm profile` writes it (as many devices "
                   "as ranks); the simulator predicts on it and the planner sets the knobs "
                   "the strategies leave open")
      ->required();
  sub_->add_option("--model", model_,
                   "tiny, or a model preset or JSON file (as `moecomm train --model`)")
      ->capture_default_str();
  sub_->add_option("--parallel", parallel_,
                   "tp=T,ep=N as for `moecomm train` (default: tp=1, ep = ranks / tp; ep is "
                   "kept for every strategy, so Lina's expert packing is not applied)");
  sub_->add_option("--strategy", strategies_,
                   "a strategy to run (name or knobs, as `moecomm train --strategy`); repeat "
                   "for several; the first is the reference. Default: baseline, hier-a2a, "
                   "netmoe, fsmoe, lina (tp=1) or baseline, hier-a2a, monta-o1, monta-o2, "
                   "monta-o3, fsmoe, lina (tp>1)");
  sub_->add_option("--warmup", warmup_, "steps run before timing")
      ->capture_default_str()
      ->check(CLI::Range(0, 1000));
  sub_->add_option("--steps", steps_, "timed steps (medians are reported)")
      ->capture_default_str()
      ->check(CLI::Range(1, 10000));
  sub_->add_option("--batch", batch_,
                   "sequences per rank per step (default: the model's micro_batch, else 4)")
      ->check(CLI::Range(1, 4096));
  sub_->add_option("--seq-len", seq_len_, "tokens per sequence (default: the model's)")
      ->check(CLI::Range(2, 4096));
  sub_->add_option("--topics", topics_,
                   "synthetic data in this many topics: the vocabulary in equal blocks, each "
                   "sequence inside one (per-sample routing locality, what NetMoE exploits)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 20));
  sub_->add_option("--ranks-per-node", ranks_per_node_,
                   "ranks per node (default: the testbed's MOECOMM_TESTBED_RANKS_PER_NODE, "
                   "else all ranks on one node)")
      ->check(CLI::Range(1, 1 << 20));
  sub_->add_option("--timeout", timeout_s_, "seconds a collective may stall before the job fails")
      ->check(kFinite)
      ->capture_default_str()
      ->check(CLI::Range(0.1, 86400.0));
  sub_->add_option("--fairness", fairness_,
                   "how the simulator shares a link between collectives: per-flow (plain "
                   "max-min over flows, as TCP connections share a queue) or per-collective "
                   "(default: the cluster file's `fairness`, which `profile` writes per-flow)")
      ->check(CLI::IsMember({"per-flow", "per-collective"}));
  sub_->add_option("--seed", seed_, "data seed")->capture_default_str();
  sub_->add_option("--svg", svg_, "write a bar chart of measured and simulated phases here");
  sub_->add_option("--trace", trace_,
                   "write a Chrome trace (Perfetto, chrome://tracing) here: every strategy's "
                   "last step, each rank's waits on its collectives beside the simulator's "
                   "schedule of the same step");
  sub_->add_flag("--json", json_,
                 "print one JSON object: {ranks, ranks_per_node, tp, ep, model, cluster, "
                 "warmup, steps, cases: [{name, strategy, notes, measured (medians), measured_p25, "
                 "measured_p75, simulated, error, "
                 "token_bytes, expert_bytes, token_ms_vs_first, backward_slowdown_ms, "
                 "grad_overlap_with_a2a_ms, loss}]}");
}

int BenchCommand::run(std::ostream& out, std::ostream& err) const {
  return run_under_mpi(err, [&] { return bench(out, err); });
}

int BenchCommand::bench(std::ostream& out, std::ostream& err) const {
  const int world = mpi_world_size(), me = mpi_world_rank();
  BenchSetup setup;
  setup.model_name = model_;
  setup.cluster_path = cluster_;
  setup.cluster = core::load_cluster(cluster_);
  setup.warmup = warmup_;
  setup.steps = steps_;
  if (!fairness_.empty()) setup.fairness = core::parse_fairness(fairness_, "--fairness");
  setup.trace = !trace_.empty();
  if (setup.trace && me == 0 && !std::ofstream(trace_))  // before the runs, not after
    throw Error("--trace", trace_ + ": cannot be written");
  rt::TrainConfig& c = setup.train;
  c.model = train_model(model_, world);
  apply_train_parallel(c, parallel_, world);
  if (c.ep == 0) c.ep = world / std::max(c.tp, 1);
  apply_batch_shape(c, model_, batch_, seq_len_);
  c.ranks_per_node = ranks_per_node(ranks_per_node_, world);
  if (world % c.ranks_per_node != 0)
    throw Error("--ranks-per-node", std::to_string(c.ranks_per_node) + " does not divide the " +
                                        std::to_string(world) + " ranks");
  c.timeout_s = timeout_s_;
  c.data_seed = seed_;
  c.topics = topics_;
  if (c.model.vocab % topics_ != 0 || c.model.vocab / topics_ < 4)
    throw Error("--topics", std::to_string(topics_) + " must divide the vocabulary " +
                                std::to_string(c.model.vocab) +
                                " into blocks of at least 4 tokens (the successors per token)");
  check_cluster(setup.cluster, cluster_, world, c.ranks_per_node);
  check_memory(c, world);
  BenchRun run{world, c.ranks_per_node, c.tp, c.ep, model_, cluster_, warmup_, steps_, {}};
  const std::vector<std::string> names =
      strategies_.empty() ? default_strategies(c.tp) : strategies_;
  for (size_t i = 0; i < names.size(); ++i) {
    if (me == 0)
      err << "bench: [" << i + 1 << "/" << names.size() << "] " << names[i] << ": "
          << warmup_ + steps_ << " steps\n"
          << std::flush;
    run.cases.push_back(run_bench_case(setup, names[i], world));
  }
  if (me != 0) return 0;
  if (!svg_.empty()) {
    write_bench_svg(run, svg_);
    err << "wrote SVG chart " << svg_ << "\n";
  }
  if (setup.trace) {
    write_bench_trace(run, trace_);
    err << "wrote Chrome trace " << trace_ << "\n";
  }
  if (json_)
    out << dump_json(bench_json(run)) << "\n";
  else
    print_bench_table(run, out);
  return 0;
}

}  // namespace moecomm::cli
