#include "rt/train_loop.h"

#include <algorithm>
#include <string>

#include "core/error.h"
#include "rt/hybrid_layout.h"
#include "rt/scheduled_train.h"
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

}  // namespace

TrainConfig checked_train_config(const TrainConfig& config) {
  TrainConfig c = config;
  if (c.ep == 0) c.ep = world_size() / std::max(c.tp, 1);
  if (c.ranks_per_node == 0) c.ranks_per_node = world_size();
  check(c);
  check_scheduled(c);
  const TrainGroups g =
      train_groups(world_size(), c.tp, c.ep, c.model.moe.experts, world_rank(), "--parallel");
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
