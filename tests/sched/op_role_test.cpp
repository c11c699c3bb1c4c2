// The one table of op roles: every role has a distinct dotted name that reads back to it,
// families group the names as reports and executors use them, and the reported phase of a
// collective follows its family (sched/reported_phase.h).
#include "sched/op_role.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

#include "sched/reported_phase.h"

namespace moecomm::sched {
namespace {

TEST(OpRole, EveryRoleHasADistinctNameThatReadsBack) {
  std::set<std::string> names;
  for (int i = 0; i < kNumOpRoles; ++i) {
    const auto role = static_cast<OpRole>(i);
    const std::string name(to_string(role));
    EXPECT_TRUE(names.insert(name).second) << name;
    EXPECT_EQ(op_role_from_string(name), role) << name;
  }
  EXPECT_EQ(names.size(), size_t(kNumOpRoles));
  EXPECT_EQ(op_role_from_string("moe.dispatch"), std::nullopt);
  EXPECT_EQ(to_string(OpRole::kDispatchA2A), "moe.dispatch.a2a");
  EXPECT_EQ(to_string(OpRole::kGradExpertAllReduce), "grad.expert.allreduce");
}

// The families are what the dotted names say: moe.netmoe.* placement, moe.hybrid.* expert
// transfer, the rest of moe.* the token path, grad.* gradient sync, pp.* the pipeline, the
// attention's and dense FFN's collectives the dense part's communication, zero.* and the
// optimizer the step's end.
TEST(OpRole, FamiliesFollowTheNames) {
  for (int i = 0; i < kNumOpRoles; ++i) {
    const auto role = static_cast<OpRole>(i);
    const std::string name(to_string(role));
    auto starts = [&](const char* p) { return name.rfind(p, 0) == 0; };
    const OpFamily want = starts("moe.netmoe.")   ? OpFamily::kPlacement
                          : starts("moe.hybrid.") ? OpFamily::kExpertTransfer
                          : starts("moe.")        ? OpFamily::kTokenPath
                          : starts("grad.")       ? OpFamily::kGradSync
                          : starts("pp.")         ? OpFamily::kPipeline
                          : starts("attn.")       ? OpFamily::kDenseComm
                          : starts("ffn.tp.")     ? OpFamily::kDenseComm
                          : starts("zero.") || name == "optimizer" ? OpFamily::kOptimizer
                                                  : OpFamily::kDense;
    EXPECT_EQ(family(role), want) << name;
  }
}

TEST(ReportedPhase, CollectivesCountByFamilyAndPhase) {
  Op collective;
  collective.kind = OpKind::kAllToAll;
  Op compute;
  compute.kind = OpKind::kCompute;
  auto phase_of = [](const Op& op, OpRole role, Phase phase) {
    return reported_phase(op, Label{role, 0, phase, -1, ""});
  };
  EXPECT_EQ(phase_of(collective, OpRole::kDispatchA2A, Phase::kForward),
            ReportedPhase::kTokenForward);
  EXPECT_EQ(phase_of(collective, OpRole::kCombineA2A, Phase::kBackward),
            ReportedPhase::kTokenBackward);
  EXPECT_EQ(phase_of(collective, OpRole::kPlacementCountsAllGather, Phase::kForward),
            ReportedPhase::kTokenForward);
  EXPECT_EQ(phase_of(collective, OpRole::kGradDenseAllReduce, Phase::kBackward),
            ReportedPhase::kGradSync);
  // HybridEP's transfers, the dense part's collectives and compute: in no phase.
  EXPECT_EQ(phase_of(collective, OpRole::kExpertTransferAllGather, Phase::kForward),
            ReportedPhase::kNone);
  EXPECT_EQ(phase_of(collective, OpRole::kAttnTpAllReduce, Phase::kForward), ReportedPhase::kNone);
  EXPECT_EQ(phase_of(compute, OpRole::kExpert, Phase::kForward), ReportedPhase::kNone);
}

}  // namespace
}  // namespace moecomm::sched
