#include "rt/scheduled_train.h"

#include <algorithm>
#include <chrono>
#include <memory>
#include <stdexcept>

#include "core/error.h"
#include "core/rank_groups.h"
#include "nn/adam.h"
#include "nn/synthetic_text.h"
#include "rt/collectives.h"
#include "rt/comm_pool.h"
#include "rt/executor.h"
#include "rt/expert_transfer_binding.h"
#include "rt/hybrid_codec.h"
#include "rt/hybrid_layout.h"
#include "rt/model_binding.h"
#include "rt/mpi_base.h"
#include "rt/train_groups.h"
#include "rt/train_report.h"
#include "sched/executor_caps.h"
#include "sched/pipeline_order.h"
#include "sched/reported_phase.h"

namespace moecomm::rt {
namespace {

// The MoE layers' Dispatch and Combine run as the schedule's A2A ops (model_binding.h): the
// layers only need to know the EP group's size and their place in it.
class ScheduledExchange : public nn::TokenExchange {
 public:
  ScheduledExchange(int ranks, int rank) : ranks_(ranks), rank_(rank) {}
  int ranks() const override { return ranks_; }
  int rank() const override { return rank_; }
  nn::ExchangeLayout exchange_counts(const std::vector<int>&) override { refuse(); }
  nn::Tensor dispatch(const nn::Tensor&, const nn::ExchangeLayout&) override { refuse(); }
  nn::Tensor combine(const nn::Tensor&, const nn::ExchangeLayout&) override { refuse(); }

 private:
  [[noreturn]] static void refuse() {
    throw std::logic_error("the schedule runtime exchanges tokens as schedule ops");
  }
  int ranks_, rank_;
};

// Model chunks per stage: interleaved's V, else 1.
int virtual_stages(const TrainConfig& c) {
  return c.strategy.pp_schedule == sched::PpSchedule::kInterleaved ? c.strategy.virtual_stages : 1;
}

// The global blocks of each of `stage`'s model chunks: virtual stage v = chunk pp + stage holds
// the v-th part of the layers (sched/pipeline_order.h's split, the schedule's).
std::vector<std::pair<int, int>> stage_chunks(const TrainConfig& c, int stage) {
  const int v = virtual_stages(c);
  const std::vector<int> off =
      sched::layer_offsets(sched::split_layers(c.model.layers, c.pp * v, "--parallel pp"));
  std::vector<std::pair<int, int>> out;
  for (int chunk = 0; chunk < v; ++chunk) {
    const size_t at = size_t(sched::virtual_stage(stage, chunk, c.pp));
    out.emplace_back(off[at], off[at + 1]);
  }
  return out;
}

sched::LayerSetup setup_of(const TrainConfig& c, const TrainGroups& g, nn::MoeTransformer& model) {
  sched::LayerSetup s;
  s.model = schedule_model(c);
  s.cluster = c.cluster;
  s.parallel = g.parallel;
  s.strategy = c.strategy;
  s.layers = c.model.layers;
  s.micro_batches = c.micro_batches;
  s.lm_head = true;
  s.optimizer = true;  // Adam runs as the step's last op (ModelBinding binds it)
  // NetMoE's schedule needs routed matrices; uniform ones size its ops for the simulator, while
  // the runtime moves the rows the step routes.
  if (c.strategy.placement == sched::Placement::kNetMoe) {
    const double bytes = double(c.batch) * c.seq_len * c.model.moe.top_k * c.model.hidden * 4;
    for (const core::RankGroup& ep : core::build_rank_groups(g.parallel).ep)
      s.a2a_pair_bytes.emplace_back(ep.size() * ep.size(), bytes / double(ep.size()));
  }
  for (int b = 0; b < s.layers; ++b) {
    double bytes = 0;
    for (const nn::Param* p : model.block_dense_params(b)) bytes += 4.0 * p->value->size();
    s.dense_grad_bytes.push_back(bytes);
  }
  return s;
}

// Seconds during which at least one of `ops` ran (chunks in flight together count once).
double union_seconds(std::vector<OpTime> ops) {
  std::sort(ops.begin(), ops.end(),
            [](const OpTime& a, const OpTime& b) { return a.start < b.start; });
  double total = 0, end = -1;
  for (const OpTime& t : ops) {
    if (t.start < 0) continue;
    if (t.start > end) {
      total += t.end - t.start;
      end = t.end;
    } else if (t.end > end) {
      total += t.end - end;
      end = t.end;
    }
  }
  return total;
}

// Seconds during which an op of `a` and an op of `b` ran at once.
double overlap_seconds(std::vector<OpTime> a, std::vector<OpTime> b) {
  auto merged = [](std::vector<OpTime> ops) {
    std::sort(ops.begin(), ops.end(),
              [](const OpTime& x, const OpTime& y) { return x.start < y.start; });
    std::vector<OpTime> out;
    for (const OpTime& t : ops) {
      if (t.start < 0) continue;
      if (!out.empty() && t.start <= out.back().end)
        out.back().end = std::max(out.back().end, t.end);
      else
        out.push_back(t);
    }
    return out;
  };
  const std::vector<OpTime> x = merged(std::move(a)), y = merged(std::move(b));
  double total = 0;
  for (size_t i = 0, j = 0; i < x.size() && j < y.size();) {
    total += std::max(0.0, std::min(x[i].end, y[j].end) - std::max(x[i].start, y[j].start));
    (x[i].end < y[j].end ? i : j) += 1;
  }
  return total;
}

// The token path's collectives in each phase and the gradients' AllReduces, from the op times.
void add_op_phases(StepReport& r, const sched::Schedule& s, const ExecResult& run, int me,
                   int world, GradSyncStats& grads) {
  std::vector<OpTime> token[2], grad, a2a;
  for (sched::OpId id : s.ops_of(me)) {
    const sched::Op& op = s.op(id);
    if (!sched::is_collective(op.kind)) continue;
    const OpTime& t = run.ops[size_t(id)];
    const sched::ReportedPhase phase = sched::reported_phase(op, s.label(id));
    switch (phase) {
      case sched::ReportedPhase::kGradSync:
        grad.push_back(t);
        ++grads.micro_ops;
        grads.allreduce_s += t.end - t.start;
        break;
      case sched::ReportedPhase::kTokenForward:
      case sched::ReportedPhase::kTokenBackward:
        token[phase == sched::ReportedPhase::kTokenBackward ? 1 : 0].push_back(t);
        if (op.kind == sched::OpKind::kAllToAll) a2a.push_back(t);
        break;
      case sched::ReportedPhase::kNone:
        break;
    }
  }
  grads.overlap_s = overlap_seconds(grad, a2a);
  add_phase_times(r, union_seconds(token[0]), union_seconds(token[1]), union_seconds(grad), world);
}

// Every rank's ops as the call trace records calls: a thread per stream, the op's label.
std::vector<CallEvent> call_events(const sched::Schedule& s, const std::vector<OpTime>& times) {
  std::vector<CallEvent> out;
  for (sched::OpId id = 0; id < s.num_ops(); ++id) {
    const OpTime& t = times[size_t(id)];
    if (t.start < 0) continue;
    const sched::Op& op = s.op(id);
    out.push_back({op.rank, op.stream, sched::to_string(s.label(id)),
                   std::string(sched::to_string(op.kind)), t.start, t.end});
  }
  return out;
}

// HybridEP's partition of this rank's EP group: a domain of one (plain EP) without expert
// transfer.
HybridLayout hybrid_of(const TrainConfig& c, const TrainGroups& g, int me) {
  const int index = int(std::find(g.ep.begin(), g.ep.end(), me) - g.ep.begin());
  const bool on = c.strategy.expert_transfer == sched::ExpertTransfer::kHybrid;
  return hybrid_layout(g.ep, index, on ? c.strategy.hybrid_domain : 1,
                       on ? c.hybrid_order : std::vector<int>{}, "strategy: hybrid_domain");
}

// This rank's TP and ESP shards; under HybridEP its domain's experts (its own from offset L).
nn::MoeTransformerConfig model_config(const TrainConfig& c, const TrainGroups& g,
                                      const HybridLayout& h) {
  nn::MoeTransformerConfig m = c.model;
  m.moe.expert_shard = {g.tp_index, c.tp};
  m.moe.recompute_experts = c.strategy.recompute_experts;  // the backward's experts recompute
  m.tp_shard = g.tp_index;
  m.tp_shards = c.tp;
  if (h.domain_size > 1) {
    m.owned_count = c.model.moe.experts / static_cast<int>(g.ep.size());
    m.owned_first = h.offset * m.owned_count;
  }
  return m;
}

// HybridEP's codec when experts travel, as the schedule's expert AllGathers carry it, with the
// shared expert initialised as the average of the layer's experts (HybridEP Sec. IV-B) by an
// AllReduce over the EP group.
// The step's micro-batches share one codec: the first's model holds the copies, the others'
// are replicas.
std::unique_ptr<HybridCodec> hybrid_codec(
    const TrainConfig& c, const TrainGroups& g, const HybridLayout& h,
    const std::vector<std::unique_ptr<nn::MoeTransformer>>& models, const sched::Schedule& schedule,
    int rank) {
  if (h.domain_size == 1) return nullptr;
  nn::MoeTransformer& model = *models.front();
  const nn::MoeTransformerConfig& m = model.config();
  auto codec = std::make_unique<HybridCodec>(
      model.moe_layers(), m.owned_first, m.owned_count, h.domain_size, h.offset,
      expert_codec_config(schedule, rank, c.model.moe.experts));
  for (size_t i = 1; i < models.size(); ++i) codec->add_replica(models[i]->moe_layers());
  if (!codec->shares()) return codec;
  std::vector<CommKey> keys;
  for (const core::RankGroup& ep : core::build_rank_groups(g.parallel).ep)
    keys.push_back({ep, 0, "ep"});
  const CommPool pool(MPI_COMM_WORLD, keys);
  CallOptions call;
  call.label =
      std::string(sched::to_string(sched::OpRole::kExpertTransferSharedAllReduce)) + " (initial)";
  call.timeout_s = c.timeout_s;
  call.ranks_per_node = c.ranks_per_node;
  for (int l = 0; l < codec->layers(); ++l) {
    std::vector<float> sum = codec->own_sum(l);
    all_reduce_sum(pool.at({g.ep, 0}), sum, call);
    codec->set_shared_sum(l, sum);
  }
  return codec;
}

// This rank's collectives' bytes by what they carry, as StepReport reports them: the token
// path (the MoE A2As and the ESP/TP collectives beside them), the gradients, the attention's
// TP AllReduces and HybridEP's expert transfers.
struct OpBytes {
  LinkBytes token, grad, tp_attention, expert, meta;
};

OpBytes op_bytes(const sched::Schedule& s, const ExecResult& run, int me) {
  OpBytes out;
  for (sched::OpId id : s.ops_of(me)) {
    const sched::OpRole role = s.label(id).role;
    const LinkBytes& b = run.bytes[size_t(id)];
    switch (sched::family(role)) {
      case sched::OpFamily::kGradSync:
        out.grad += b;
        break;
      case sched::OpFamily::kExpertTransfer:
        out.expert += b;
        break;
      case sched::OpFamily::kPlacement:  // NetMoE's counts, aux sums and targets
        out.meta += b;
        break;
      case sched::OpFamily::kTokenPath:
        out.token += b;
        break;
      default:
        if (role == sched::OpRole::kAttnTpAllReduce) out.tp_attention += b;
    }
  }
  return out;
}

void sum_over_ranks(const LinkBytes& mine, LinkBytes& total) {
  MPI_Allreduce(mine.bytes.data(), total.bytes.data(), kNumLinkLevels, MPI_INT64_T, MPI_SUM,
                MPI_COMM_WORLD);
}

}  // namespace

core::ModelConfig schedule_model(const TrainConfig& c) {
  core::ModelConfig m;
  m.hidden = c.model.hidden;
  m.ffn_hidden = c.model.moe.ffn_hidden;
  m.experts = c.model.moe.experts;
  m.top_k = c.model.moe.top_k;
  m.router_groups = c.model.moe.router_groups;
  m.router_group_top_k = c.model.moe.router_group_top_k;
  m.layers = c.model.layers;
  m.heads = c.model.heads;
  m.seq_len = c.seq_len;
  m.micro_batch = c.batch;
  if (c.model.moe.capacity_factor > 0) m.capacity_factor = c.model.moe.capacity_factor;
  // The runtime computes and keeps fp32; the token A2As' rows travel as the strategy's
  // a2a_dtype, which their codec carries to the token path (model_binding.h).
  m.dtype_bytes = 4;
  m.ffn_type = c.model.moe.ffn_type;
  m.vocab_size = c.model.vocab;
  return m;
}

void check_scheduled(const TrainConfig& c) {
  const std::string pp = "pp=" + std::to_string(c.pp);
  if (c.micro_batches < 1)
    throw Error("--micro-batches", "must be >= 1, got " + std::to_string(c.micro_batches));
  if (c.pp < 1) throw Error("--parallel", pp + ": must be >= 1");
  const int v = virtual_stages(c);
  if (c.model.layers < c.pp * v)
    throw Error("--parallel", pp + ": the model's " + std::to_string(c.model.layers) +
                                  " layers cannot give each of " + std::to_string(c.pp * v) +
                                  " (virtual) stages one");
  if (v > 1 && c.micro_batches % c.pp != 0)
    throw Error("--micro-batches",
                std::to_string(c.micro_batches) + ": pp_schedule=interleaved:" + std::to_string(v) +
                    " runs micro-batches in groups of " + pp +
                    " stages: they must be a multiple of " + std::to_string(c.pp));
  if (c.strategy.zero > 0)
    throw Error("strategy: zero",
                "zero=" + std::to_string(c.strategy.zero) +
                    ": the runtime keeps the optimizer states and parameters whole on every "
                    "rank (zero=0)");
  if (c.pp > 1 && c.record_routing)
    throw Error("--routing-trace", pp + ": each stage sees only its layers' routing; record it "
                                        "with pp=1");
}

namespace {

// The step's schedule, refused with the MoE ops the runtime has no kernel or buffer for
// (sched/executor_caps.h) before any binding or collective is set up.
std::shared_ptr<const sched::Schedule> bindable(sched::Schedule schedule) {
  if (const auto r = sched::op_refusal(schedule, sched::Executor::kRuntime))
    throw Error(r->where, r->why);
  return std::make_shared<const sched::Schedule>(std::move(schedule));
}

// One training run on the schedule runtime: the groups, the models, its step's schedule, the
// executor that runs it and the bindings of the models' kernels, built once; then per step:
// draw the batch, run the schedule (the optimizer steps in it or right after), report.
//
// Micro-batches: the layers keep their activations inside them (nn/moe_transformer.h), and a
// pipeline keeps several micro-batches' forwards alive on a stage (1F1B up to pp, GPipe all M).
// Each micro-batch therefore runs on a model of its own, with its own binding: the models are
// built from the same seeds, so their weights are equal, and stay equal because Adam steps the
// first and its weights are copied to the others. The gradient sync sums the micro-batches'
// gradients into the first model as it packs them (GradBinding's sources), so the sum over
// micro-batches and ranks is exact and moves once per step. This costs M copies of the weights,
// which the small models `moecomm train` runs afford, and needs no change to any layer.
class ScheduledTraining {
 public:
  explicit ScheduledTraining(const TrainConfig& c);
  int rank() const { return me_; }
  TrainResult start() const;  // what the result holds before any step
  StepReport step(int step, TrainResult& result);
  void finish(TrainResult& result);

 private:
  nn::MoeTransformer& model() { return *models_.front(); }
  std::vector<std::unique_ptr<nn::MoeTransformer>> make_models();
  void make_bindings();
  ExecResult run(int step);
  void optimize();
  void keep(int step, const ExecResult& run, TrainResult& result);
  StepReport report(int step, const ExecResult& run, double ms);
  void record_routing(TrainResult& result);
  void add_placement(StepReport& r) const;

  const TrainConfig& c_;
  int world_ = 0, me_ = 0;
  TrainGroups g_;
  HybridLayout hybrid_;
  ScheduledExchange exchange_;
  std::vector<std::unique_ptr<nn::MoeTransformer>> models_;  // per micro-batch
  std::shared_ptr<const sched::Schedule> schedule_;
  std::unique_ptr<HybridCodec> codec_;  // after schedule_: its config is the ops' codec
  Executor executor_;
  std::vector<std::unique_ptr<ModelBinding>> bindings_;  // per micro-batch
  std::vector<ModelBinding*> owner_;                     // by OpId: its binding, or nullptr
  nn::Adam adam_;
  nn::SyntheticText text_;
  bool has_optimizer_op_ = false;  // the schedule steps the optimizer as an op
  bool optimized_ = false;         // this step's optimizer ran
  // With keep_gradients, the last step's gradients as the optimizer saw them.
  std::vector<std::pair<std::string, nn::Tensor>> kept_gradients_;
  bool keep_now_ = false;
};

int peer_index(const HybridLayout& h, int me) {
  return int(std::find(h.peers.begin(), h.peers.end(), me) - h.peers.begin());
}

ScheduledTraining::ScheduledTraining(const TrainConfig& c)
    : c_(c),
      world_(world_size()),
      me_(world_rank()),
      g_(train_groups(world_, c.tp, c.ep, c.model.moe.experts, me_, "--parallel", c.pp)),
      hybrid_(hybrid_of(c, g_, me_)),
      exchange_(int(hybrid_.peers.size()), peer_index(hybrid_, me_)),
      models_(make_models()),
      schedule_(bindable(sched::build_training_step(setup_of(c, g_, model())))),
      codec_(hybrid_codec(c, g_, hybrid_, models_, *schedule_, me_)),
      executor_(MPI_COMM_WORLD, *schedule_, {c.timeout_s, c.ranks_per_node}),
      adam_(model().params(), nn::AdamConfig{.lr = c.lr}),
      text_(nn::SyntheticTextConfig{
          .vocab = c.model.vocab, .seed = c.data_seed, .topics = c.topics, .order = c.text_order}) {
  make_bindings();
}

std::vector<std::unique_ptr<nn::MoeTransformer>> ScheduledTraining::make_models() {
  std::vector<std::unique_ptr<nn::MoeTransformer>> out;
  for (int m = 0; m < c_.micro_batches; ++m)
    out.push_back(std::make_unique<nn::MoeTransformer>(model_config(c_, g_, hybrid_), exchange_));
  return out;
}

void ScheduledTraining::make_bindings() {
  StageBinding stage;
  stage.chunks = stage_chunks(c_, g_.stage);
  const int mbs = c_.micro_batches;
  for (int m = 0; m < mbs; ++m) {
    BindingOptions o{{c_.hybrid_order, hybrid_.domain_size, codec_.get()}, c_.ranks_per_node};
    o.stage = stage;
    o.micro_batch = mbs == 1 ? -1 : m;
    o.step_ops = m == 0;
    if (m == 0)
      for (int other = 1; other < mbs; ++other)
        o.grad_sources.push_back(models_[size_t(other)].get());
    if (m == 0) o.optimizer = [this] { optimize(); };
    bindings_.push_back(std::make_unique<ModelBinding>(*schedule_, me_, *models_[size_t(m)], o));
  }
  owner_.assign(size_t(schedule_->num_ops()), nullptr);
  for (sched::OpId id : schedule_->ops_of(me_)) {
    for (auto& b : bindings_)
      if (b->owns(id)) owner_[size_t(id)] = b.get();
    if (!owner_[size_t(id)])
      throw Error("schedule runtime", schedule_->describe(id) + ": micro-batch " +
                                          std::to_string(schedule_->label(id).micro_batch) +
                                          " of a step of " + std::to_string(mbs));
    has_optimizer_op_ |= schedule_->label(id).role == sched::OpRole::kOptimizer;
  }
  for (auto& b : bindings_)
    if (mbs > 1 && !b->owns_any())
      throw Error("--micro-batches",
                  std::to_string(mbs) + ": the step's schedule has no ops of one of them on rank " +
                      std::to_string(me_));
  for (auto& b : bindings_) b->bind_kernels(executor_);
  executor_.set_buffers([this](sched::OpId id) { return owner_[size_t(id)]->buffer(id); });
  executor_.set_after([this](sched::OpId id) { owner_[size_t(id)]->after(id); });
}

TrainResult ScheduledTraining::start() const {
  TrainResult result;
  if (c_.corpus.empty()) result.entropy_floor = text_.entropy_floor(c_.seq_len);
  if (c_.keep_op_times && me_ == 0) result.schedule = schedule_;
  if (c_.record_routing && me_ == 0) {
    result.routing.experts = c_.model.moe.experts;
    result.routing.top_k = c_.model.moe.top_k;
  }
  return result;
}

// The step's batch of micro_batches x batch sequences, the same on every stage of a pipeline
// (its data rank); micro-batch m takes sequences [m batch, (m + 1) batch), so a step of M
// micro-batches sees what one micro-batch of M x batch sequences would.
ExecResult ScheduledTraining::run(int step) {
  const int mbs = c_.micro_batches, all = mbs * c_.batch;
  const nn::TextBatch batch =
      c_.corpus.empty()
          ? text_.sample(all, c_.seq_len, static_cast<uint64_t>(step), g_.data_rank)
          : corpus_batch(c_.corpus, all, c_.seq_len, c_.data_seed, step, g_.data_rank);
  const size_t tokens = size_t(c_.batch) * size_t(c_.seq_len);
  for (int m = 0; m < mbs; ++m) {
    models_[size_t(m)]->zero_grad();
    const auto from = [&](const std::vector<int>& v) {
      return std::vector<int>(v.begin() + long(size_t(m) * tokens),
                              v.begin() + long(size_t(m + 1) * tokens));
    };
    bindings_[size_t(m)]->start_step(from(batch.tokens), from(batch.targets), c_.seq_len);
  }
  optimized_ = false;
  ExecResult result = executor_.run();
  if (!has_optimizer_op_) optimize();
  return result;
}

// The step's gradients, summed over the micro-batches and the ranks that hold copies, scaled
// to the mean over the step's M x batch sequences of every data rank; one Adam step; the
// micro-batches' models take the new weights.
void ScheduledTraining::optimize() {
  bindings_.front()->finish_step();
  nn::scale_grad(model().params(), 1.0f / static_cast<float>(g_.data_ranks * c_.micro_batches));
  if (keep_now_) {
    kept_gradients_.clear();
    for (nn::Param* p : model().params()) kept_gradients_.emplace_back(p->name, *p->grad);
  }
  adam_.step();
  const std::vector<nn::Param*> params = model().params();
  for (size_t m = 1; m < models_.size(); ++m) {
    const std::vector<nn::Param*> copy = models_[m]->params();
    for (size_t i = 0; i < params.size(); ++i) *copy[i]->value = *params[i]->value;
  }
  optimized_ = true;
}

StepReport ScheduledTraining::step(int step, TrainResult& result) {
  const auto start = std::chrono::steady_clock::now();
  keep_now_ = c_.keep_gradients && step + 1 == c_.steps;
  const ExecResult run = this->run(step);
  if (!optimized_) throw Error("schedule runtime", "the step's optimizer op did not run");
  keep(step, run, result);
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  const StepReport r = report(step, run, ms);
  if (c_.record_routing) record_routing(result);
  return r;
}

// What the caller asked to keep: op times, the last step's ops as calls, its gradients (the
// mean over the distinct batches, as the optimizer saw them) and the first micro-batch's
// samples' losses.
void ScheduledTraining::keep(int step, const ExecResult& run, TrainResult& result) {
  const bool last = step + 1 == c_.steps, traced = c_.trace_last_step && last;
  if (c_.keep_op_times || traced) {
    std::vector<OpTime> all = gather_op_times(MPI_COMM_WORLD, run.ops, c_.timeout_s);
    if (me_ == 0 && traced) result.last_step_calls = call_events(*schedule_, all);
    if (me_ == 0 && c_.keep_op_times) result.op_times.push_back(std::move(all));
  }
  if (c_.keep_gradients && last) {
    result.gradients = std::move(kept_gradients_);
    gather_samples(model(), g_, bindings_.front()->netmoe() != nullptr, c_.batch, world_, result);
  }
}

// The step's loss, as step_report means it over the world: the mean over micro-batches of the
// cross-entropy (on the last stage) and the auxiliary losses of this stage's layers, times pp,
// so that the mean over the world is the mean over the pipelines of their sums over stages.
StepReport ScheduledTraining::report(int step, const ExecResult& run, double ms) {
  const bool last_stage = g_.stage + 1 == c_.pp;
  float loss = 0, lm_loss = 0;
  for (size_t m = 0; m < models_.size(); ++m) {
    const nn::MoeTransformer& model = *models_[m];
    loss += last_stage ? bindings_[m]->loss() : c_.model.aux_loss_weight * model.aux_loss();
    lm_loss += last_stage ? model.lm_loss() : 0.0f;
  }
  const float scale = float(c_.pp) / float(c_.micro_batches);
  GradSyncStats grads;
  grads.bytes = bindings_.front()->grad_bytes();
  grads.votes = run.gate_votes;
  grads.held_s = run.gate_held_s;
  StepReport r;
  add_op_phases(r, *schedule_, run, me_, world_, grads);
  const OpBytes bytes = op_bytes(*schedule_, run, me_);
  LinkBytes headers, token = bytes.token;  // the layout's counts are metadata, not rows
  std::vector<int64_t> meta(size_t(world_), 0);
  for (const auto& b : bindings_) {
    const std::vector<int64_t> mine = b->meta_bytes();
    for (size_t i = 0; i < mine.size() && i < meta.size(); ++i) meta[i] += mine[i];
  }
  for (int rank = 0; rank < world_; ++rank)
    headers.add(me_, rank, meta[size_t(rank)], c_.ranks_per_node);
  for (int l = 0; l < kNumLinkLevels; ++l) token.bytes[size_t(l)] -= headers.bytes[size_t(l)];
  headers += bytes.meta;
  const StepReport totals =
      step_report(step + 1, loss * scale, lm_loss * scale, ms, token, bytes.grad, grads, world_);
  r.step = totals.step;
  r.loss = totals.loss;
  r.lm_loss = totals.lm_loss;
  r.step_ms = totals.step_ms;
  r.a2a = totals.a2a;
  r.grad = totals.grad;
  r.grad_sync = totals.grad_sync;
  sum_over_ranks(headers, r.a2a_meta);
  sum_over_ranks(bytes.tp_attention, r.tp_attention);
  sum_over_ranks(bytes.expert, r.expert);
  add_placement(r);
  const double synced_ms = run.wall_s * 1e3;
  MPI_Allreduce(&synced_ms, &r.synced_ms, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return r;
}

// placement=netmoe's solver times (zero without it), maxed over ranks.
void ScheduledTraining::add_placement(StepReport& r) const {
  const NetMoeBinding* netmoe = bindings_.front()->netmoe();
  double ms[2] = {netmoe ? netmoe->stats().solve_us / 1e3 : 0,
                  netmoe ? netmoe->stats().wait_us / 1e3 : 0};
  MPI_Allreduce(MPI_IN_PLACE, ms, 2, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  r.placement_solve_ms = ms[0];
  r.placement_wait_ms = ms[1];
}

// The first micro-batch's routing (record_routing needs pp = 1).
void ScheduledTraining::record_routing(TrainResult& result) {
  std::vector<place::LayerRouting> layers;
  for (nn::MoeLayer* layer : model().moe_layers()) {
    layers.emplace_back();
    record(*layer, c_.batch, c_.seq_len, world_, c_.tp, me_, layers.back());
  }
  if (me_ == 0) result.routing.iterations.push_back(std::move(layers));
}

// The routing matrices of the first micro-batch's dispatches.
void ScheduledTraining::finish(TrainResult& result) {
  result.block_dense_grad_bytes = setup_of(c_, g_, model()).dense_grad_bytes;
  const double row = 4.0 * c_.model.hidden;
  const ModelBinding& binding = *bindings_.front();
  if (const NetMoeBinding* netmoe = binding.netmoe()) {
    result.dispatch_bytes =
        ep_matrices(netmoe->scatter_rows(), netmoe->scatters(), row, g_, world_);
    result.combine_bytes = ep_matrices(netmoe->gather_rows(), netmoe->scatters(), row, g_, world_);
    return;
  }
  result.dispatch_bytes =
      ep_matrices(binding.dispatch_rows(), binding.dispatches(), row, g_, world_);
}

}  // namespace

TrainResult train_scheduled(const TrainConfig& c,
                            const std::function<void(const StepReport&)>& on_step) {
  check_scheduled(c);
  TrainConfig config = c;  // expert choice has no per-token top-k to record
  if (config.model.moe.gate == nn::GateKind::kExpertChoice) config.record_routing = false;
  ScheduledTraining training(config);  // build the schedule, bind the models' kernels
  TrainResult result = training.start();
  for (int step = 0; step < config.steps; ++step) {  // run, report
    result.steps.push_back(training.step(step, result));
    if (training.rank() == 0 && on_step) on_step(result.steps.back());
  }
  training.finish(result);
  return result;
}

}  // namespace moecomm::rt
