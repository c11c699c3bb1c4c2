#pragma once
// Which schedules an executor runs, in one table both executors consult (DESIGN.md "One
// schedule, three executors"): the MPI runtime (`moecomm train`, rt/model_binding.h) and
// moecomm.torch refuse a strategy because the schedule built for it holds MoE ops they cannot
// bind, named by role, layer, phase and the knob that emitted them, or, where every op binds
// but the run would still be wrong, because of one of the semantic rules listed here once.
// The simulator prices every op and consults neither.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "sched/op.h"
#include "sched/schedule.h"
#include "sched/strategy.h"

namespace moecomm::sched {

enum class Executor : uint8_t {
  kRuntime,            // rt: `moecomm train` on MPI
  kTorchLayer,         // moecomm.torch.MoELayer: samples stay home
  kTorchSampleMoving,  // moecomm.torch.SampleMovingMoE: placement=netmoe
};
inline constexpr int kNumExecutors = 3;
std::string_view to_string(Executor executor);  // "rt", "torch_layer", "torch_sample_moving"
std::optional<Executor> executor_from_string(std::string_view name);

// The MoE path a schedule asks for, read off its ops' families: NetMoE's placement ops move
// samples (and win over the rest), HybridEP's expert transfers move experts, else tokens.
enum class MoePath : uint8_t { kTokens, kExpertTransfer, kSamples };
std::string_view to_string(MoePath path);
MoePath moe_path(const Schedule& schedule);

// Whether `executor` binds an op of `role` on `path`. Only the MoE layer's families (token
// path, placement, expert transfer) are decided here; the dense part, the pipeline and the
// gradient AllReduces are the bindings' own business (rt's ModelBinding::check_ops).
bool binds(Executor executor, MoePath path, OpRole role);

// The MoE ops of a schedule an executor cannot bind, one per (role, phase, knob), each at its
// lowest layer, in the order the schedule first labels them.
std::vector<Label> unbound_ops(const Schedule& schedule, Executor executor);

// What a run adds to the strategy, for the semantic rules.
struct RunFacts {
  int tp = 1;
  int esp = 1;
  float capacity_factor = 0;  // 0: the dropless layout
  bool token_choice_gate = true;
  bool cluster_given = true;  // moecomm.torch always has one (its default: one node)
  bool records_routing = false;
};

// A refusal as Error(where, why): `where` names what the user must change ("strategy: tp",
// "--record-routing", "strategy" for ops the executor cannot bind).
struct Refusal {
  std::string where, why;
  bool operator==(const Refusal&) const = default;
};

// The semantic rules: combinations whose ops all bind but that the executor cannot run
// correctly. Consulted before the schedule is built (the runtime refuses before any rank
// builds one).
std::optional<Refusal> semantic_refusal(const Strategy& strategy, const RunFacts& facts,
                                        Executor executor);
// The ops `executor` cannot bind, as one refusal naming each and the path's reason.
std::optional<Refusal> op_refusal(const Schedule& schedule, Executor executor);
// semantic_refusal, then op_refusal: what an executor that has built the schedule refuses.
std::optional<Refusal> refusal(const Schedule& schedule, const Strategy& strategy,
                               const RunFacts& facts, Executor executor);

}  // namespace moecomm::sched
