// HybridEP's SR compression in training (Fig. 14, at 150 steps here): with experts sent 50x
// compressed to every rank of the EP group, the loss with the shared expert stays nearer the
// baseline's than without it. The data needs the experts (order-2 text: the next token depends on
// the last two) and the experts share structure (upcycled: one base FFN plus 0.1 x their own), SR's
// premise (Fig. 9a).
#include <gtest/gtest.h>

#include <numeric>
#include <string>

#include "mpi_test_util.h"
#include "rt/train_loop.h"
#include "sched/strategy.h"

namespace moecomm::rt {
namespace {

TrainConfig fig14(const std::string& strategy) {
  TrainConfig c;
  const int world = test::world_size();
  c.model.vocab = 16;
  c.model.max_seq = 32;
  c.model.hidden = 64;
  c.model.heads = 4;
  c.model.layers = 2;
  c.model.moe.ffn_hidden = 128;
  c.model.moe.experts = 2 * world;
  c.model.moe.top_k = 2;
  c.model.moe.expert_spread = 0.1f;
  c.text_order = 2;
  c.batch = 32 / world;  // 32 sequences per step on any world
  c.seq_len = 32;
  c.steps = 150;
  c.ranks_per_node = world / 2;
  c.timeout_s = test::kTimeout;
  c.strategy = sched::parse_strategy(strategy, "test");
  return c;
}

double late_loss(const TrainResult& r) {  // mean LM loss of the last 20 steps
  double sum = 0;
  for (size_t s = r.steps.size() - 20; s < r.steps.size(); ++s) sum += r.steps[s].lm_loss;
  return sum / 20;
}

// sr_feedback (ours): copies converge to their owners' experts, so the same 50x trains much
// nearer the baseline than the paper's SR, at the same bytes.
TEST(HybridTraining, SharedExpertAndFeedbackKeepTheCompressedLossNearerTheBaseline) {
  const std::string hybrid =
      "base=hybridep,compression=0.02,hybrid_domain=" + std::to_string(test::world_size());
  const double base = late_loss(train(fig14("baseline")));
  const double with_s = late_loss(train(fig14(hybrid)));
  const double without_s = late_loss(train(fig14(hybrid + ",shared_expert=false")));
  const double feedback = late_loss(train(fig14(hybrid + ",sr_feedback=true")));
  if (test::world_rank() == 0)
    std::cout << "np " << test::world_size() << " mean LM loss of steps 131-150: baseline " << base
              << ", SR 50x w/ S " << with_s << ", w/o S " << without_s << ", w/ S and feedback "
              << feedback << "\n";
  EXPECT_LT(base, with_s);  // compression costs something
  EXPECT_LT(with_s - base, 0.7 * (without_s - base));
  EXPECT_LT(feedback - base, 0.4 * (with_s - base));
}

}  // namespace
}  // namespace moecomm::rt
