#include "rt/train_loop.h"

#include <algorithm>
#include <string>

#include "core/error.h"
#include "rt/hybrid_layout.h"
#include "rt/scheduled_train.h"
#include "rt/train_groups.h"
#include "rt/train_report.h"
#include "sched/executor_caps.h"

namespace moecomm::rt {

namespace {

// What the run adds to its strategy for the executors' shared semantic rules
// (sched/executor_caps.h); the ops the runtime cannot bind are refused once the schedule is
// built (scheduled_train.cpp).
sched::RunFacts run_facts(const TrainConfig& c) {
  sched::RunFacts f;
  f.tp = c.tp;
  f.esp = c.tp;  // the runtime's ESP group is its TP group
  f.capacity_factor = c.model.moe.capacity_factor;
  f.token_choice_gate = c.model.moe.gate != nn::GateKind::kExpertChoice;
  f.cluster_given = !c.hybrid_order.empty();  // the cluster's levels order HybridEP's members
  f.records_routing = c.record_routing;
  return f;
}

void check_strategy(const TrainConfig& c) {
  sched::validate(c.strategy, "strategy");
  if (const auto r = sched::semantic_refusal(c.strategy, run_facts(c), sched::Executor::kRuntime))
    throw Error(r->where, r->why);
}

void check(const TrainConfig& c) {
  check_strategy(c);
  const nn::MoeLayerSpec& moe = c.model.moe;
  if (const auto p = core::router_groups_problem(moe.experts, moe.top_k, moe.router_groups,
                                                 moe.router_group_top_k))
    throw Error("model: " + p->key, p->message);
  if (moe.gate == nn::GateKind::kExpertChoice &&
      core::limits_groups(moe.router_groups, moe.router_group_top_k))
    throw Error("--gate",
                "expert-choice lets experts choose tokens: it cannot limit a token to "
                "router_group_top_k = " +
                    std::to_string(moe.router_group_top_k) +
                    " groups (use gshard, sigmoid or xmoe)");
  if (c.seq_len < 2 || c.seq_len > c.model.max_seq)
    throw Error("seq_len", "must be in [2, " + std::to_string(c.model.max_seq) + "]");
  if (c.batch < 1 || c.steps < 1) throw Error("train", "batch and steps must be >= 1");
  if (!c.corpus.empty() && static_cast<int>(c.corpus.size()) <= c.seq_len)
    throw Error("--data", "the corpus has " + std::to_string(c.corpus.size()) +
                              " tokens, fewer than a sequence of " + std::to_string(c.seq_len) +
                              " + 1");
}

}  // namespace

TrainConfig checked_train_config(const TrainConfig& config) {
  TrainConfig c = config;
  if (c.ep == 0) c.ep = world_size() / std::max(c.pp, 1) / std::max(c.tp, 1);
  if (c.ranks_per_node == 0) c.ranks_per_node = world_size();
  check(c);
  check_scheduled(c);
  const TrainGroups g =
      train_groups(world_size(), c.tp, c.ep, c.model.moe.experts, world_rank(), "--parallel", c.pp);
  if (c.strategy.expert_transfer == sched::ExpertTransfer::kHybrid) {  // the domains fit the EP
    const int index = int(std::find(g.ep.begin(), g.ep.end(), world_rank()) - g.ep.begin());
    hybrid_layout(g.ep, index, c.strategy.hybrid_domain, c.hybrid_order, "strategy: hybrid_domain");
  }
  return c;
}

TrainResult train(const TrainConfig& config,
                  const std::function<void(const StepReport&)>& on_step) {
  return train_scheduled(checked_train_config(config), on_step);
}

}  // namespace moecomm::rt
