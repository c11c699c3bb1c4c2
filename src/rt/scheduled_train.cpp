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
#include "rt/hybrid_codec.h"
#include "rt/hybrid_experts.h"
#include "rt/model_binding.h"
#include "rt/mpi_base.h"
#include "rt/train_groups.h"
#include "rt/train_report.h"

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

sched::LayerSetup setup_of(const TrainConfig& c, const TrainGroups& g, nn::MoeTransformer& model) {
  sched::LayerSetup s;
  s.model = schedule_model(c);
  s.cluster = c.cluster;
  s.parallel = g.parallel;
  s.strategy = c.strategy;
  s.layers = c.model.layers;
  s.lm_head = true;
  for (int b = 0; b < c.model.layers; ++b) {
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

// The token path's collectives in each phase and the gradients' AllReduces, from the op times.
void add_op_phases(StepReport& r, const sched::Schedule& s, const ExecResult& run, int me,
                   int world, GradSyncStats& grads) {
  std::vector<OpTime> token[2], grad;
  for (sched::OpId id : s.ops_of(me)) {
    const sched::Op& op = s.op(id);
    if (!sched::is_collective(op.kind)) continue;
    const sched::Label& label = s.label(id);
    const OpTime& t = run.ops[size_t(id)];
    if (label.name.rfind("grad.", 0) == 0) {
      grad.push_back(t);
      ++grads.micro_ops;
      grads.allreduce_s += t.end - t.start;
    } else if (label.name.rfind("moe.", 0) == 0) {
      token[label.phase == sched::Phase::kBackward ? 1 : 0].push_back(t);
    }
  }
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

struct Hybrid {
  HybridLayout layout;  // a domain of one (plain EP) without expert transfer
};

Hybrid hybrid_of(const TrainConfig& c, const TrainGroups& g, int me) {
  const int index = int(std::find(g.ep.begin(), g.ep.end(), me) - g.ep.begin());
  const bool on = c.strategy.expert_transfer == sched::ExpertTransfer::kHybrid;
  return {hybrid_layout(g.ep, index, on ? c.strategy.hybrid_domain : 1,
                        on ? c.hybrid_order : std::vector<int>{}, "strategy: hybrid_domain")};
}

// This rank's TP and ESP shards; under HybridEP its domain's experts (its own from offset L).
nn::MoeTransformerConfig model_config(const TrainConfig& c, const TrainGroups& g,
                                      const HybridLayout& h) {
  nn::MoeTransformerConfig m = c.model;
  m.moe.expert_shard = {g.tp_index, c.tp};
  m.tp_shard = g.tp_index;
  m.tp_shards = c.tp;
  if (h.domain_size > 1) {
    m.owned_count = c.model.moe.experts / static_cast<int>(g.ep.size());
    m.owned_first = h.offset * m.owned_count;
  }
  return m;
}

// HybridEP's codec when experts travel, with the shared expert initialised as the average of
// the layer's experts (HybridEP Sec. IV-B) by an AllReduce over the EP group.
std::unique_ptr<HybridCodec> hybrid_codec(const TrainConfig& c, const TrainGroups& g,
                                          const HybridLayout& h, nn::MoeTransformer& model) {
  if (h.domain_size == 1) return nullptr;
  const nn::MoeTransformerConfig& m = model.config();
  auto codec = std::make_unique<HybridCodec>(
      model.moe_layers(), m.owned_first, m.owned_count, h.domain_size, h.offset,
      HybridCodecConfig{sched::effective_compression(c.strategy), c.strategy.shared_expert,
                        c.model.moe.experts, c.strategy.sr_feedback});
  if (!codec->shares()) return codec;
  std::vector<CommKey> keys;
  for (const core::RankGroup& ep : core::build_rank_groups(g.parallel).ep)
    keys.push_back({ep, 0, "ep"});
  const CommPool pool(MPI_COMM_WORLD, keys);
  CallOptions call;
  call.label = "moe.hybrid.shared_allreduce (initial)";
  call.timeout_s = c.timeout_s;
  call.ranks_per_node = c.ranks_per_node;
  for (int l = 0; l < codec->layers(); ++l) {
    std::vector<float> sum = codec->own_sum(l);
    all_reduce_sum(pool.at({g.ep, 0}), sum, call);
    codec->set_shared_sum(l, sum);
  }
  return codec;
}

}  // namespace

core::ModelConfig schedule_model(const TrainConfig& c) {
  core::ModelConfig m;
  m.hidden = c.model.hidden;
  m.ffn_hidden = c.model.moe.ffn_hidden;
  m.experts = c.model.moe.experts;
  m.top_k = c.model.moe.top_k;
  m.layers = c.model.layers;
  m.heads = c.model.heads;
  m.seq_len = c.seq_len;
  m.micro_batch = c.batch;
  if (c.model.moe.capacity_factor > 0) m.capacity_factor = c.model.moe.capacity_factor;
  m.dtype_bytes = c.bf16_a2a ? 2 : 4;
  m.ffn_type = c.model.moe.expert == nn::ExpertKind::kMixtralFfn ? core::FfnType::kSwiglu
                                                                 : core::FfnType::kGelu;
  m.vocab_size = c.model.vocab;
  return m;
}

void check_scheduled(const TrainConfig& c) {
  const sched::Strategy& s = c.strategy;
  auto refuse = [](const std::string& what, const std::string& why) {
    throw Error(what, why + ": the schedule runtime does not run it yet (--runtime hand-built)");
  };
  if (s.placement != sched::Placement::kNone) refuse("strategy: placement", "placement=netmoe");
  if (c.bf16_a2a) refuse("--bf16-a2a", "bf16 token rows");
}

TrainResult train_scheduled(const TrainConfig& c,
                            const std::function<void(const StepReport&)>& on_step) {
  check_scheduled(c);
  int world = 0, me = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  MPI_Comm_rank(MPI_COMM_WORLD, &me);
  const TrainGroups g = train_groups(world, c.tp, c.ep, c.model.moe.experts, me, "--parallel");
  const Hybrid hybrid = hybrid_of(c, g, me);
  const auto peer = std::find(hybrid.layout.peers.begin(), hybrid.layout.peers.end(), me);
  ScheduledExchange exchange(int(hybrid.layout.peers.size()),
                             int(peer - hybrid.layout.peers.begin()));
  nn::MoeTransformer model(model_config(c, g, hybrid.layout), exchange);
  const std::unique_ptr<HybridCodec> codec = hybrid_codec(c, g, hybrid.layout, model);
  const auto shared =
      std::make_shared<const sched::Schedule>(sched::build_training_step(setup_of(c, g, model)));
  const sched::Schedule& schedule = *shared;
  Executor executor(MPI_COMM_WORLD, schedule, {c.timeout_s, c.ranks_per_node});
  ModelBinding binding(schedule, me, model,
                       {c.hybrid_order, hybrid.layout.domain_size, codec.get()});
  binding.bind(executor);
  nn::Adam adam(model.params(), nn::AdamConfig{.lr = c.lr});
  const nn::SyntheticText text(nn::SyntheticTextConfig{
      .vocab = c.model.vocab, .seed = c.data_seed, .topics = c.topics, .order = c.text_order});
  TrainResult result;
  if (c.corpus.empty()) result.entropy_floor = text.entropy_floor(c.seq_len);
  const bool routing = c.record_routing && c.model.moe.gate != nn::GateKind::kExpertChoice;
  if (c.keep_op_times && me == 0) result.schedule = shared;
  if (routing && me == 0) {
    result.routing.experts = c.model.moe.experts;
    result.routing.top_k = c.model.moe.top_k;
  }
  const float mean_scale = 1.0f / static_cast<float>(g.data_ranks);  // as train_loop.cpp's
  for (int step = 0; step < c.steps; ++step) {
    const auto start = std::chrono::steady_clock::now();
    const nn::TextBatch batch =
        c.corpus.empty()
            ? text.sample(c.batch, c.seq_len, static_cast<uint64_t>(step), g.data_rank)
            : corpus_batch(c.corpus, c.batch, c.seq_len, c.data_seed, step, g.data_rank);
    adam.zero_grad();
    binding.start_step(batch.tokens, batch.targets, c.seq_len);
    const ExecResult run = executor.run();
    const bool traced = c.trace_last_step && step + 1 == c.steps;
    if (c.keep_op_times || traced) {
      std::vector<OpTime> all = gather_op_times(MPI_COMM_WORLD, run.ops, c.timeout_s);
      if (me == 0 && traced) result.last_step_calls = call_events(schedule, all);
      if (me == 0 && c.keep_op_times) result.op_times.push_back(std::move(all));
    }
    nn::scale_grad(model.params(), mean_scale);
    if (c.keep_gradients && step + 1 == c.steps) {
      for (nn::Param* p : model.params()) result.gradients.emplace_back(p->name, *p->grad);
      gather_samples(model, g, false, c.batch, world, result);
    }
    adam.step();
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    GradSyncStats grads;
    grads.bytes = binding.grad_bytes();
    grads.votes = run.gate_votes;
    grads.held_s = run.gate_held_s;
    StepReport r;
    add_op_phases(r, schedule, run, me, world, grads);
    const StepReport totals = step_report(step + 1, binding.loss(), model.lm_loss(), ms,
                                          run.a2a_bytes, run.other_bytes, grads, world);
    r.step = totals.step;
    r.loss = totals.loss;
    r.lm_loss = totals.lm_loss;
    r.step_ms = totals.step_ms;
    r.a2a = totals.a2a;
    r.grad = totals.grad;
    r.grad_sync = totals.grad_sync;
    const double synced_ms = run.wall_s * 1e3;
    MPI_Allreduce(&synced_ms, &r.synced_ms, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    if (routing) {
      std::vector<place::LayerRouting> layers;
      for (nn::MoeLayer* layer : model.moe_layers()) {
        layers.emplace_back();
        record(*layer, c.batch, c.seq_len, world, c.tp, me, layers.back());
      }
      if (me == 0) result.routing.iterations.push_back(std::move(layers));
    }
    result.steps.push_back(r);
    if (me == 0 && on_step) on_step(r);
  }
  result.block_dense_grad_bytes = setup_of(c, g, model).dense_grad_bytes;
  result.dispatch_bytes =
      ep_matrices(binding.dispatch_rows(), binding.dispatches(), 4.0 * c.model.hidden, g, world);
  return result;
}

}  // namespace moecomm::rt
