#include "cli/train_command.h"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <ostream>
#include <sstream>

#include "cli/json_output.h"
#include "cli/mpi_command.h"
#include "cli/train_model.h"
#include "cli/train_strategy.h"
#include "core/error.h"
#include "core/ffn_type_names.h"
#include "core/parallel_config.h"
#include "core/presets.h"
#include "nn/moe_layer_factory.h"
#include "place/routing_trace.h"
#include "rt/config_fingerprint.h"
#include "rt/mpi_base.h"
#include "rt/train_loop.h"
#include "sched/strategy.h"

namespace moecomm::cli {

namespace {

// A flag whose value `parse` checks (throwing Error "FLAG: why"), shown in --help as the
// accepted names; the error keeps the parser's "did you mean" (CLI11 adds the "FLAG: ").
CLI::Validator parsed_by(std::function<void(const std::string&)> parse,
                         const std::vector<std::string>& names) {
  std::string shown;
  for (const std::string& n : names) shown += (shown.empty() ? "{" : ",") + n;
  return CLI::Validator(
      [parse](std::string& value) {
        try {
          parse(value);
          return std::string();
        } catch (const Error& e) {
          const std::string why = e.what();
          return why.substr(why.find(": ") + 2);
        }
      },
      shown + "}");
}

}  // namespace

TrainCommand::TrainCommand(CLI::App& app) {
  sub_ = app.add_subcommand(
      "train",
      "Train a small MoE transformer language model on the ranks of mpirun (experts split\n"
      "over EP groups, everything else data parallel): per step the loss, the step time and\n"
      "the A2A bytes by link level. Run as: mpirun -np P moecomm train [...]");
  sub_->add_option("--model", model_,
                   "tiny (4 heads x 64 hidden, 2 layers, 2 experts per rank, vocab 64), or a "
                   "model preset or JSON file (its hidden, ffn_hidden, heads, layers, experts, "
                   "top_k, seq_len, vocab_size)")
      ->capture_default_str();
  sub_->add_option("--parallel", parallel_,
                   "tp=T,ep=N,pp=P: TP group size (consecutive ranks, default 1; attention "
                   "heads and experts are sharded over it, esp = tp), EP group size (default: "
                   "the ranks / tp / pp) and pipeline stages (default 1; the slowest rank "
                   "dimension: stage s holds the s-th of P runs of the layers, the "
                   "embedding on the first, the LM head on the last; P must divide the ranks "
                   "and be at most the layers); dp is the rest; cp = 1");
  sub_->add_option("--steps", steps_, "training steps")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000000));
  sub_->add_option("--batch", batch_, "sequences per rank per micro-batch")
      ->capture_default_str()
      ->check(CLI::Range(1, 4096));
  sub_->add_option("--micro-batches", micro_batches_,
                   "micro-batches of --batch sequences per step (default: the model's "
                   "micro_batches, else 1): their gradients are summed and synced once, Adam "
                   "steps once, so a step equals one batch of M x --batch sequences (the "
                   "capacity and the auxiliary loss are taken per micro-batch)")
      ->check(CLI::Range(1, 1024));
  sub_->add_option("--pp-schedule", pp_schedule_,
                   "the order of the micro-batches' forwards and backwards on the pipeline "
                   "stages: gpipe, 1f1b (the default) or interleaved:V (V model chunks per "
                   "stage; micro-batches a multiple of pp); sets the strategy's pp_schedule "
                   "knob (--strategy must not set another)")
      ->check(parsed_by(
          [](const std::string& v) {
            sched::Strategy s;
            sched::parse_pp_schedule(s, v, "--pp-schedule");
          },
          sched::pp_schedule_names()));
  sub_->add_option("--seq-len", seq_len_, "tokens per sequence")
      ->capture_default_str()
      ->check(CLI::Range(2, 4096));
  sub_->add_option("--lr", lr_, "Adam learning rate")
      ->check(kFinite)
      ->capture_default_str()
      ->check(CLI::Range(1e-7, 1.0));
  sub_->add_option("--data", data_,
                   "synthetic (a fixed random Markov chain; the loss floor is printed) or a file "
                   "of whitespace-separated token ids")
      ->capture_default_str();
  sub_->add_option("--gate", gate_, "gate")
      ->capture_default_str()
      ->check(parsed_by([](const std::string& g) { nn::parse_gate_kind(g, "--gate"); },
                        nn::gate_kind_names()));
  sub_->add_option("--ffn-type", ffn_type_,
                   "expert FFN: gelu (GPT's) or swiglu (Mixtral's); default: the model's "
                   "ffn_type")
      ->check(parsed_by([](const std::string& t) { core::parse_ffn_type(t, "--ffn-type"); },
                        {"gelu", "swiglu"}));
  // The expert FFN's one name is ffn_type (model files, moecomm.torch): the old flag is
  // refused with the new one's spelling rather than kept as a second name.
  sub_->add_option("--expert", renamed_expert_, "now --ffn-type (gpt: gelu, mixtral: swiglu)")
      ->group("Renamed")
      ->check(CLI::Validator(
          [](std::string& v) {
            const char* now = v == "gpt" ? "gelu" : v == "mixtral" ? "swiglu" : "gelu|swiglu";
            return "renamed --ffn-type; did you mean --ffn-type " + std::string(now) + "?";
          },
          ""));
  sub_->add_option("--capacity-factor", capacity_factor_, "capacity layout factor; 0: dropless")
      ->check(kFinite)
      ->capture_default_str()
      ->check(CLI::Range(0.0f, 64.0f));
  sub_->add_option("--a2a", a2a_, "A2A algorithm (the strategy's a2a knob)")
      ->capture_default_str()
      ->check(CLI::IsMember(sched::a2a_algorithm_names()));
  sub_->add_option("--strategy", strategy_,
                   "a strategy name (baseline, the default; hier-a2a, monta-o1, monta-o2, "
                   "monta-o3, fsmoe, lina, hybridep, netmoe) or knobs as in `moecomm sim` "
                   "(base=NAME,chunks=4,...); "
                   "knobs not given come from the planner (`moecomm plan`) for --cluster. "
                   "netmoe runs with tp=1, a token-choice gate and the dropless layout; "
                   "hybridep (hybrid_domain=S, compression=C, shared_expert=BOOL, "
                   "sr_feedback=BOOL) with tp=1 and pipelined chunks: experts travel inside "
                   "domains of S consecutive EP ranks, tokens across them. "
                   "a2a_dtype=fp32|bf16 (or DISPATCH/COMBINE, e.g. bf16/fp32) sends the token "
                   "A2As' rows in that dtype (bf16: half the bytes, plain EP with tp=1 only; "
                   "fp8 is priced by `moecomm sim`, not run)")
      ->capture_default_str();
  sub_->add_option("--cluster", cluster_,
                   "the machine the ranks run on (a cluster preset or JSON file with as many "
                   "devices as ranks): the planner chooses the knobs --strategy leaves unset "
                   "for it; without it they keep the named strategy's defaults");
  // Replaced by the a2a_dtype knob; kept out of --help to say so by name.
  sub_->add_flag("--bf16-a2a", bf16_, "")->group("");
  sub_->add_option("--ranks-per-node", ranks_per_node_,
                   "ranks per node, for the A2A bytes by level and 1DH/2DH (default: all ranks "
                   "on one node)")
      ->check(CLI::Range(0, 1 << 20));
  sub_->add_option("--timeout", timeout_s_, "seconds a collective may stall before the job fails")
      ->check(kFinite)
      ->capture_default_str()
      ->check(CLI::Range(0.1, 86400.0));
  sub_->add_option("--seed", seed_, "data seed")->capture_default_str();
  sub_->add_option("--text-order", text_order_,
                   "synthetic data: the next token depends on the current token (1) or on the "
                   "last two (2: the experts must combine two positions)")
      ->capture_default_str()
      ->check(CLI::Range(1, 2));
  sub_->add_option("--expert-spread", expert_spread_,
                   "upcycled experts (every expert = one base FFN + SPREAD x its own random "
                   "FFN; the redundancy among experts HybridEP's SR compression relies on); "
                   "default: independent random experts")
      ->check(kFinite)
      ->check(CLI::Range(0.0f, 100.0f));
  sub_->add_option("--routing-trace", routing_trace_,
                   "write the routing of every step and MoE layer here ('' to skip)")
      ->capture_default_str();
  sub_->add_option("--log-every", log_every_, "print every N steps")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000000));
  sub_->add_flag("--json", json_,
                 "print one JSON object: {steps: [{step, loss, lm_loss, step_ms, "
                 "a2a_bytes: {same_device, intra_node, inter_node}, grad_bytes, tp_bytes, "
                 "expert_bytes (HybridEP), grad_sync}], ...}");
}

namespace {

std::vector<int> read_corpus(const std::string& path, int vocab) {
  std::ifstream in(path);
  if (!in) throw Error(path, "cannot open the token file");
  std::vector<int> ids;
  std::string word;
  while (in >> word) {
    size_t used = 0;
    int id = -1;
    try {
      id = std::stoi(word, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != word.size() || id < 0 || id >= vocab)
      throw Error(path + ": token " + std::to_string(ids.size()),
                  "'" + word + "' is not a token id in [0, " + std::to_string(vocab) + ")");
    ids.push_back(id);
  }
  if (ids.empty()) throw Error(path, "holds no token ids");
  return ids;
}

// Fail before training, not after it: the trace is written at the end.
void check_writable(const std::string& path) {
  const bool existed = std::filesystem::exists(path);
  std::ofstream probe(path, std::ios::app);
  if (!probe) throw Error("--routing-trace", path + ": cannot be written");
  probe.close();
  if (!existed) std::filesystem::remove(path);
}

// The model's shape and the ranks' layout, so that `place --trace` and `infer --trace` price
// and replay the routing as this run made it without being told.
void describe_routing(place::RoutingTrace& trace, const rt::TrainConfig& c,
                      const std::string& model, int world) {
  place::TraceModel m;
  m.name = model == "tiny" ? model : core::load_model(model).name;
  m.hidden = c.model.hidden;
  m.ffn_hidden = c.model.moe.ffn_hidden;
  m.ffn_type = c.model.moe.ffn_type;
  // The dispatch A2A's rows: fp32, or bfloat16 with a2a_dtype=bf16 (the runtime sends no other).
  const auto& wire = c.strategy.a2a_dtype;
  m.dtype_bytes = wire && wire->dispatch == core::Dtype::kBf16 ? 2 : 4;
  trace.model = m;
  place::TraceLayout layout;
  layout.ranks = world;
  layout.ranks_per_node = c.ranks_per_node > 0 ? c.ranks_per_node : world;
  layout.tp = c.tp;
  trace.layout = layout;
}

nlohmann::json bytes_json(const rt::LinkBytes& b) {
  return {{"same_device", b[rt::LinkLevel::kSameDevice]},
          {"intra_node", b[rt::LinkLevel::kIntraNode]},
          {"inter_node", b[rt::LinkLevel::kInterNode]}};
}

}  // namespace

int TrainCommand::run(std::ostream& out, std::ostream& err) const {
  return run_under_mpi(err, [&] { return train(out, err); });
}

// The run's config from the flags and files, completed (ep, ranks per node) and checked as
// rt::train does. Throws Error on bad input.
rt::TrainConfig TrainCommand::config(int world, std::vector<std::string>& notes,
                                     std::ostream& out) const {
  const int me = mpi_world_rank();
  rt::TrainConfig c;
  c.model = train_model(model_, world);
  c.model.moe.gate = nn::parse_gate_kind(gate_, "--gate");
  if (gate_ == "sigmoid") c.model.moe.top_k = 1;
  if (!ffn_type_.empty()) c.model.moe.ffn_type = core::parse_ffn_type(ffn_type_, "--ffn-type");
  c.model.moe.capacity_factor = capacity_factor_;
  c.model.moe.expert_spread = expert_spread_;
  c.model.max_seq = std::max(c.model.max_seq, seq_len_);
  apply_train_parallel(c, parallel_, world, /*pipeline=*/true);
  c.micro_batches = micro_batches_ > 0 ? micro_batches_
                    : model_ == "tiny" ? 1
                                       : std::max(1, int(core::load_model(model_).micro_batches));
  c.batch = batch_;
  c.seq_len = seq_len_;
  c.steps = steps_;
  c.lr = lr_;
  c.data_seed = seed_;
  c.text_order = text_order_;
  if (text_order_ != 1 && data_ != "synthetic")
    throw Error("--text-order", "applies to the synthetic data only, not --data " + data_);
  c.ranks_per_node = ranks_per_node_;
  c.timeout_s = timeout_s_;
  if (bf16_)
    throw Error("--bf16-a2a",
                "was replaced by the strategy knob a2a_dtype: --strategy "
                "base=NAME,a2a_dtype=bf16 (or a2a_dtype=bf16 alone for the baseline)");
  notes = resolve_strategy(c, strategy_, a2a_, sub_->count("--a2a") > 0, cluster_, model_, world);
  apply_pp_schedule(c, strategy_, pp_schedule_);
  c.record_routing = !routing_trace_.empty();
  if (c.pp > 1 && c.record_routing && !sub_->count("--routing-trace")) {
    c.record_routing = false;  // each stage sees only its layers
    if (me == 0 && !json_) out << "(pp=" << c.pp << ": no routing trace is written)\n";
  }
  if (data_ != "synthetic") c.corpus = read_corpus(data_, c.model.vocab);
  check_memory(c, world);
  if (c.model.moe.gate == nn::GateKind::kExpertChoice && c.record_routing) {
    if (sub_->count("--routing-trace"))
      throw Error("--routing-trace", "expert-choice routing has no per-token top-k to record");
    c.record_routing = false;
    if (me == 0 && !json_) out << "(expert-choice routing: no routing trace is written)\n";
  }
  if (c.strategy.placement == sched::Placement::kNetMoe && c.record_routing) {
    if (sub_->count("--routing-trace"))
      throw Error("--routing-trace",
                  "placement=netmoe moves samples between layers; recording "
                  "their routing is not supported yet");
    c.record_routing = false;
    if (me == 0 && !json_) out << "(placement=netmoe: no routing trace is written)\n";
  }
  if (c.record_routing && me == 0) check_writable(routing_trace_);
  return rt::checked_train_config(c);
}

int TrainCommand::train(std::ostream& out, std::ostream& err) const {
  int world = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  const int me = mpi_world_rank();
  std::vector<std::string> notes;
  rt::TrainConfig c;
  std::string error;
  try {
    c = config(world, notes, out);
  } catch (const Error& e) {
    error = e.what();
  }
  if (!all_ranks_accept(error, err)) return 2;  // one message, every rank exits 2
  // Ranks started with other flags or files would run other schedules: their collectives
  // would mismatch (an MPI error) or train apart. Compared before the first collective.
  if (!all_ranks_accept(rt::compare_settings(MPI_COMM_WORLD, rt::train_settings(c)), err)) return 2;
  if (me == 0 && !json_) {
    out << "training " << (model_ == "tiny" ? "tiny MoE LM" : model_) << " on " << world
        << " ranks: " << c.model.layers << " layers, hidden " << c.model.hidden << ", "
        << c.model.moe.experts << " experts (top-" << c.model.moe.top_k << ", gate " << gate_
        << "), " << c.micro_batches << " x " << c.batch << " x " << c.seq_len
        << " tokens per rank per step"
        << (c.pp > 1 ? " on " + std::to_string(c.pp) + " stages" : "") << "\n"
        << "strategy " << c.strategy.name << " (" << sched::to_string(c.strategy) << ")\n";
    for (const std::string& n : notes) out << "  planned: " << n << "\n";
    out.flush();
  }
  rt::TrainResult result = rt::train(c, [&](const rt::StepReport& r) {
    if (json_ || (r.step % log_every_ != 0 && r.step != 1 && r.step != steps_)) return;
    char line[256];
    std::snprintf(line, sizeof line,
                  "step %5d  loss %.4f (lm %.4f)  %.2f ms  token-path bytes: same-device %lld, "
                  "intra-node %lld, inter-node %lld\n",
                  r.step, r.loss, r.lm_loss, r.step_ms,
                  static_cast<long long>(r.a2a[rt::LinkLevel::kSameDevice]),
                  static_cast<long long>(r.a2a[rt::LinkLevel::kIntraNode]),
                  static_cast<long long>(r.a2a[rt::LinkLevel::kInterNode]));
    out << line;
    out.flush();
  });
  if (me != 0) return 0;
  if (c.record_routing && !result.routing.iterations.empty()) {
    describe_routing(result.routing, c, model_, world);
    place::write_routing_trace(result.routing, routing_trace_);
    if (!json_)
      out << "wrote the routing trace " << routing_trace_
          << " with the model's shape and the ranks' layout (moecomm place --trace, "
             "moecomm infer --trace)\n";
  }
  if (json_) {
    nlohmann::json steps = nlohmann::json::array();
    for (const rt::StepReport& r : result.steps) {
      steps.push_back({{"step", r.step},
                       {"loss", r.loss},
                       {"lm_loss", r.lm_loss},
                       {"step_ms", r.step_ms},
                       {"a2a_bytes", bytes_json(r.a2a)},
                       {"grad_bytes", bytes_json(r.grad)},
                       {"tp_bytes", bytes_json(r.tp_attention)},
                       {"expert_bytes", bytes_json(r.expert)},
                       {"grad_sync",
                        {{"micro_ops", r.grad_sync.micro_ops},
                         {"allreduce_s", r.grad_sync.allreduce_s},
                         {"overlap_with_a2a_s", r.grad_sync.overlap_s},
                         {"held_s", r.grad_sync.held_s}}}});
    }
    out << dump_json({{"ranks", world},
                      {"strategy", sched::to_string(c.strategy)},
                      {"strategy_notes", notes},
                      {"steps", steps},
                      {"entropy_floor", result.entropy_floor},
                      {"routing_trace", c.record_routing ? routing_trace_ : ""}},
                     -1)
        << "\n";
  } else if (result.entropy_floor > 0) {
    char line[128];
    std::snprintf(line, sizeof line, "the data's entropy floor is %.4f nats per token\n",
                  result.entropy_floor);
    out << line;
  }
  return 0;
}

}  // namespace moecomm::cli
