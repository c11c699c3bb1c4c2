#include "rt/train_loop.h"

#include <algorithm>
#include <chrono>
#include <memory>
#include <numeric>

#include "core/error.h"
#include "core/rank_groups.h"
#include "nn/adam.h"
#include "nn/synthetic_text.h"
#include "rt/busy_time.h"
#include "rt/collectives.h"
#include "rt/comm_pool.h"
#include "rt/hybrid_experts.h"
#include "rt/mpi_base.h"
#include "rt/netmoe_exchange.h"
#include "rt/scheduled_train.h"
#include "rt/train_exchange.h"
#include "rt/train_groups.h"
#include "rt/train_report.h"

namespace moecomm::rt {

namespace {

// HybridEP runs on the plain EP token path: the knobs that would change it are refused by
// name, so no run silently differs from what was asked.
void check_hybrid(const TrainConfig& c) {
  const sched::Strategy& s = c.strategy;
  auto refuse = [](const std::string& knob, const std::string& why) {
    throw Error("strategy: " + knob, "expert_transfer=hybrid " + why);
  };
  if (c.tp != 1) refuse("tp", "runs with tp=1 only for now, got tp=" + std::to_string(c.tp));
  if (s.placement != sched::Placement::kNone) refuse("placement", "does not move samples");
  if (s.tp_dispatch != sched::TpDispatch::kReplicate)
    refuse("tp_dispatch", "runs without tensor parallelism only");
  if (!s.pipeline_experts && (s.chunks_fwd != 1 || s.chunks_bwd != 1))
    refuse("chunks", "pipelines its chunks through the experts only (pipeline_experts=true)");
  if (!s.hybrid_levels.empty() && c.hybrid_order.empty())
    refuse("hybrid_levels", "needs the cluster (--cluster) to place its per-level domains");
}

void check_strategy(const TrainConfig& c) {
  sched::validate(c.strategy, "strategy");
  if (c.strategy.expert_transfer == sched::ExpertTransfer::kHybrid) check_hybrid(c);
}

// NetMoE moves samples on its own token path (rt/netmoe_exchange.h): the token-path knobs
// that would change it are refused until they compose with it; gradient sync is independent.
void check_netmoe(const TrainConfig& c) {
  const sched::Strategy& s = c.strategy;
  auto refuse = [](const std::string& knob, const std::string& why) {
    throw Error("strategy: " + knob, "placement=netmoe " + why);
  };
  if (c.tp != 1) refuse("tp", "runs with tp=1 only for now, got tp=" + std::to_string(c.tp));
  if (s.a2a != sched::Algorithm::kFlat) refuse("a2a", "runs on the flat A2A only for now");
  if (s.tp_dispatch != sched::TpDispatch::kReplicate)
    refuse("tp_dispatch", "runs without tensor parallelism only");
  // FSMoE / Lina: chunks pipelined through the experts (nn/sample_moving_moe.h).
  if (s.copy_pipelining) refuse("copy_pipelining", "does not run MoNTA's copy pipelining (O3)");
  if ((s.chunks_fwd != 1 || s.chunks_bwd != 1) && !s.pipeline_experts)
    refuse("chunks", "pipelines its chunks through the experts only (pipeline_experts=true)");
  if (c.model.moe.capacity_factor > 0.0f)
    refuse("placement",
           "inlines the expert residual, which needs the dropless layout "
           "(capacity_factor 0, got " +
               std::to_string(c.model.moe.capacity_factor) + ")");
  if (c.model.moe.gate == nn::GateKind::kExpertChoice)
    refuse("placement", "needs a token-choice gate, not expert choice");
  if (c.bf16_a2a) refuse("--bf16-a2a", "sends fp32 rows only for now");
  if (c.record_routing) refuse("--record-routing", "does not record routing yet");
}

// What only the schedule runtime runs: tensor parallelism (DeepSpeed's and MoNTA's token
// paths, the attention's TP AllReduces) and MoNTA's communication-only chunks.
void check_hand_built(const TrainConfig& c) {
  const std::string why = ": runs on the schedule runtime (--runtime schedule or auto)";
  const sched::Strategy& s = c.strategy;
  if (c.tp > 1) throw Error("--parallel", "tp=" + std::to_string(c.tp) + why);
  if (!s.pipeline_experts && (s.chunks_fwd > 1 || s.chunks_bwd > 1))
    throw Error("strategy: pipeline_experts", "pipeline_experts=false with chunks" + why);
}

void check(const TrainConfig& c) {
  check_strategy(c);
  if (c.seq_len < 2 || c.seq_len > c.model.max_seq)
    throw Error("seq_len", "must be in [2, " + std::to_string(c.model.max_seq) + "]");
  if (c.batch < 1 || c.steps < 1) throw Error("train", "batch and steps must be >= 1");
  if (!c.corpus.empty() && static_cast<int>(c.corpus.size()) <= c.seq_len)
    throw Error("--data", "the corpus has " + std::to_string(c.corpus.size()) +
                              " tokens, fewer than a sequence of " + std::to_string(c.seq_len) +
                              " + 1");
}

// placement=netmoe's metadata bytes and solver times (zero without it), summed or maxed.
void add_placement(const NetMoeExchange* netmoe, StepReport& r) {
  LinkBytes meta;
  double ms[2] = {0, 0};
  if (netmoe) {
    meta = netmoe->meta_bytes();
    ms[0] = netmoe->stats().solve_us / 1e3;
    ms[1] = netmoe->stats().wait_us / 1e3;
  }
  MPI_Allreduce(meta.bytes.data(), r.a2a_meta.bytes.data(), kNumLinkLevels, MPI_INT64_T, MPI_SUM,
                MPI_COMM_WORLD);
  MPI_Allreduce(MPI_IN_PLACE, ms, 2, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  r.placement_solve_ms = ms[0];
  r.placement_wait_ms = ms[1];
}

// The routing the steps had, as the simulator takes it (TrainResult::dispatch_bytes).
void add_routing_matrices(const TokenPath& path, const NetMoeExchange* netmoe, const TrainConfig& c,
                          const TrainGroups& g, int world, TrainResult& out) {
  const double row = static_cast<double>(c.model.hidden) * (c.bf16_a2a ? 2 : 4);
  if (netmoe) {
    out.dispatch_bytes = ep_matrices(netmoe->scatter_rows(), netmoe->scatters(), row, g, world);
    out.combine_bytes = ep_matrices(netmoe->gather_rows(), netmoe->scatters(), row, g, world);
    return;
  }
  const ActivityExchange& a = path.tracked();
  // Expert e lives at position e / L of the member order (HybridEP's renumbering).
  const size_t per_member = static_cast<size_t>(c.model.moe.experts) / g.ep.size();
  const bool renumbered =
      c.strategy.expert_transfer == sched::ExpertTransfer::kHybrid && !c.hybrid_order.empty();
  std::vector<int64_t> member_rows(g.ep.size(), 0);
  for (size_t e = 0; e < a.expert_rows().size(); ++e) {
    const size_t p = e / per_member;
    member_rows[renumbered ? static_cast<size_t>(c.hybrid_order[p]) : p] += a.expert_rows()[e];
  }
  out.dispatch_bytes = ep_matrices(member_rows, a.dispatches(), row, g, world);
}

// Per step, the statistics of this step only (GradSync's are cumulative).
GradSyncStats minus(GradSyncStats a, const GradSyncStats& b) {
  a.micro_ops -= b.micro_ops;
  a.bytes -= b.bytes;
  a.allreduce_s -= b.allreduce_s;
  a.overlap_s -= b.overlap_s;
  a.held_s -= b.held_s;
  a.votes -= b.votes;
  return a;
}

// HybridEP's partition of this rank's EP group; a one-member domain when the strategy has none.
HybridLayout train_hybrid_layout(const TrainConfig& c, const TrainGroups& g, int me) {
  const int index = static_cast<int>(std::find(g.ep.begin(), g.ep.end(), me) - g.ep.begin());
  const bool hybrid = c.strategy.expert_transfer == sched::ExpertTransfer::kHybrid;
  return hybrid_layout(g.ep, index, hybrid ? c.strategy.hybrid_domain : 1,
                       hybrid ? c.hybrid_order : std::vector<int>{}, "strategy: hybrid_domain");
}

std::vector<CommKey> comm_keys(const TrainConfig& c, const TrainGroups& g) {
  std::vector<CommKey> keys = train_comm_keys(g.parallel, 3);
  if (c.strategy.expert_transfer == sched::ExpertTransfer::kHybrid) {
    for (CommKey& k : hybrid_comm_keys(g.parallel, c.strategy.hybrid_domain, c.hybrid_order, 3))
      keys.push_back(std::move(k));
  }
  return keys;
}

// The experts that travel (domains of more than one member), each layer receiving its
// domain's experts just before its MoE forward.
std::unique_ptr<HybridExperts> start_hybrid(nn::MoeTransformer& model, const CommPool& pool,
                                            const HybridLayout& h, const TrainConfig& c,
                                            const TrainGroups& g, const CallOptions& options) {
  if (h.domain_size == 1) return nullptr;
  const nn::MoeTransformerConfig& m = model.config();
  HybridConfig config{sched::effective_compression(c.strategy), c.strategy.shared_expert,
                      c.model.moe.experts, options, c.strategy.sr_feedback};
  auto experts =
      std::make_unique<HybridExperts>(model.moe_layers(), m.owned_first, m.owned_count,
                                      pool.at({h.domain, 3}), pool.at({g.ep, 3}), config);
  const std::vector<nn::MoeLayer*> layers = model.moe_layers();
  for (size_t l = 0; l < layers.size(); ++l) {
    layers[l]->hooks().before_moe_start = [e = experts.get(), l](nn::Tensor&) {
      e->receive(static_cast<int>(l));
    };
  }
  return experts;
}

}  // namespace

TrainResult train(const TrainConfig& config_in,
                  const std::function<void(const StepReport&)>& on_step) {
  const int world = world_size(), me = world_rank();
  TrainConfig c = config_in;
  if (c.ep == 0) c.ep = world / std::max(c.tp, 1);
  if (c.ranks_per_node == 0) c.ranks_per_node = world;
  check(c);
  if (c.runtime == Runtime::kAuto)
    c.runtime = scheduled_runs(c) ? Runtime::kSchedule : Runtime::kHandBuilt;
  if (c.runtime == Runtime::kSchedule) return train_scheduled(c, on_step);
  check_hand_built(c);
  if (c.strategy.placement == sched::Placement::kNetMoe) check_netmoe(c);
  const TrainGroups g = train_groups(world, c.tp, c.ep, c.model.moe.experts, me, "--parallel");
  // Channel 0: the token path (its threads use the EP and TP communicators apart); 1: the
  // gradient AllReduce thread; 2: the attention's TP AllReduces.
  const HybridLayout hybrid = train_hybrid_layout(c, g, me);
  CommPool pool(MPI_COMM_WORLD, comm_keys(c, g));
  CallOptions options;
  options.timeout_s = c.timeout_s;
  options.ranks_per_node = c.ranks_per_node;
  CallTrace trace;
  if (c.trace_last_step) options.trace = &trace;
  A2AActivity activity;
  BusyTime token_busy, grad_busy;  // the phases StepReport times
  CallOptions token_options = options;
  token_options.busy = &token_busy;
  TokenPath path(g, pool, {c.strategy, c.bf16_a2a, token_options, hybrid.peers}, activity);
  nn::MoeTransformerConfig model_config = c.model;
  model_config.moe.expert_shard = {g.tp_index, c.tp};
  model_config.tp_shard = g.tp_index;
  model_config.tp_shards = c.tp;
  if (hybrid.domain_size > 1) {  // HybridEP: each layer holds its domain's experts
    model_config.owned_count = c.model.moe.experts / static_cast<int>(g.ep.size());
    model_config.owned_first = hybrid.offset * model_config.owned_count;  // [position L, ...)
  }
  if (c.strategy.pipeline_experts) {
    model_config.moe.chunks_fwd = c.strategy.chunks_fwd;
    model_config.moe.chunks_bwd = c.strategy.chunks_bwd;
  }
  nn::MoeTransformer model(model_config, path.exchange());
  std::unique_ptr<NetMoeExchange> netmoe;  // NetMoE: samples move on its own token path
  if (c.strategy.placement == sched::Placement::kNetMoe) {
    netmoe = std::make_unique<NetMoeExchange>(pool.at({g.ep, 0}), token_options, c.model.layers,
                                              c.model.moe.experts, &activity);
    if (c.strategy.pipeline_experts)
      netmoe->set_chunks(c.strategy.chunks_fwd, c.strategy.chunks_bwd);
    model.move_samples(*netmoe);
  }
  const std::unique_ptr<HybridExperts> travelling =
      start_hybrid(model, pool, hybrid, c, g, options);
  nn::Adam adam(model.params(), nn::AdamConfig{.lr = c.lr});
  LinkBytes grad_bytes;
  CallOptions grad_options = options;
  grad_options.label = "grad";
  grad_options.bytes = &grad_bytes;
  grad_options.busy = &grad_busy;
  const Comm* edp = g.edp.size() > 1 ? &pool.at({g.edp, 1}) : nullptr;
  GradSync sync(c.strategy.grad_sync, c.strategy.grad_partitions, pool.at({g.dp, 1}), edp,
                grad_options, activity);
  const nn::SyntheticText text(nn::SyntheticTextConfig{
      .vocab = c.model.vocab, .seed = c.data_seed, .topics = c.topics, .order = c.text_order});
  TrainResult result;
  if (c.corpus.empty()) result.entropy_floor = text.entropy_floor(c.seq_len);
  const bool routing = c.record_routing && !model.moe_layers().empty() &&
                       c.model.moe.gate != nn::GateKind::kExpertChoice;
  if (routing && me == 0) {
    result.routing.experts = c.model.moe.experts;
    result.routing.top_k = c.model.moe.top_k;
  }
  // Means over the distinct batches: each gradient sums every batch once. Dense ones (a TP
  // shard's, or a replicated parameter's, equal on the TP members) over the DP group; an
  // expert shard's over its EP group's batches (A2A backward), then its EDP copies.
  const float mean_scale = 1.0f / static_cast<float>(g.data_ranks);
  for (int step = 0; step < c.steps; ++step) {
    const bool traced = c.trace_last_step && step + 1 == c.steps;
    if (traced) trace.arm(me);
    const auto start = std::chrono::steady_clock::now();
    const nn::TextBatch batch =
        c.corpus.empty()
            ? text.sample(c.batch, c.seq_len, static_cast<uint64_t>(step), g.data_rank)
            : corpus_batch(c.corpus, c.batch, c.seq_len, c.data_seed, step, g.data_rank);
    path.reset_bytes();
    if (netmoe) netmoe->reset_stats();
    grad_bytes = {};
    const GradSyncStats before = sync.stats();
    adam.zero_grad();
    if (travelling) {
      travelling->reset_bytes();
      travelling->start_iteration();
    }
    const double token0 = token_busy.seconds(), grad0 = grad_busy.seconds();
    const auto forward_start = CallTrace::Clock::now();
    const float loss = model.forward(batch.tokens, batch.targets, c.seq_len);
    const double token1 = token_busy.seconds();
    const auto backward_start = CallTrace::Clock::now();
    trace.record("forward", "", forward_start, backward_start);
    model.backward(
        [&](int block) {
          // The copies' gradients are home before the EDP AllReduce reads them.
          if (travelling && edp) travelling->wait_grads(block);
          sync.layer_ready(block, model.block_dense_params(block),
                           model.block_expert_params(block));
        },
        [&](int block) {
          if (travelling) travelling->return_grads(block);
        });
    const auto finish_start = CallTrace::Clock::now();
    trace.record("backward", "", backward_start, finish_start);
    if (travelling) travelling->finish();
    sync.finish();
    trace.record("grad sync finish", "", finish_start, CallTrace::Clock::now());
    if (traced) trace.disarm();
    const double token2 = token_busy.seconds(), grad2 = grad_busy.seconds();
    const double synced_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    nn::scale_grad(model.params(), mean_scale);
    if (c.keep_gradients && step + 1 == c.steps) {
      for (nn::Param* p : model.params()) result.gradients.emplace_back(p->name, *p->grad);
      gather_samples(model, g, netmoe != nullptr, c.batch, world, result);
    }
    adam.step();
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    StepReport r = step_report(step + 1, loss, model.lm_loss(), ms,
                               netmoe ? netmoe->row_bytes() : path.bytes(), grad_bytes,
                               minus(sync.stats(), before), world);
    add_placement(netmoe.get(), r);
    add_phase_times(r, token1 - token0, token2 - token1, grad2 - grad0, world);
    MPI_Allreduce(&synced_ms, &r.synced_ms, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    const LinkBytes expert_bytes = travelling ? travelling->bytes() : LinkBytes{};
    MPI_Allreduce(expert_bytes.bytes.data(), r.expert.bytes.data(), kNumLinkLevels, MPI_INT64_T,
                  MPI_SUM, MPI_COMM_WORLD);
    if (routing) {
      std::vector<place::LayerRouting> layers;
      for (nn::MoeLayer* layer : model.moe_layers()) {
        layers.emplace_back();
        record(*layer, c.batch, c.seq_len, world, c.tp, me, layers.back());
      }
      if (me == 0) result.routing.iterations.push_back(std::move(layers));
    }
    if (traced) result.last_step_calls = gather_call_events(trace.events(), MPI_COMM_WORLD, 0);
    result.steps.push_back(r);
    if (me == 0 && on_step) on_step(r);
  }
  add_routing_matrices(path, netmoe.get(), c, g, world, result);
  for (int b = 0; b < c.model.layers; ++b) {
    double bytes = 0;
    for (const nn::Param* p : model.block_dense_params(b)) bytes += 4.0 * p->value->size();
    result.block_dense_grad_bytes.push_back(bytes);
  }
  return result;
}

}  // namespace moecomm::rt
