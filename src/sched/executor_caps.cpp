#include "sched/executor_caps.h"

#include <array>
#include <initializer_list>
#include <map>
#include <tuple>

namespace moecomm::sched {
namespace {

using R = OpRole;

constexpr std::array<std::string_view, kNumExecutors> kNames = {"rt", "torch_layer",
                                                                "torch_sample_moving"};

bool in(OpRole role, std::initializer_list<OpRole> roles) {
  for (OpRole r : roles)
    if (r == role) return true;
  return false;
}

bool is_moe_family(OpFamily f) {
  return f == OpFamily::kTokenPath || f == OpFamily::kPlacement || f == OpFamily::kExpertTransfer;
}

// The A2A path every MoE executor runs: Dispatch, the experts, Combine.
bool plain_ep(OpRole r) {
  return in(r, {R::kDispatchA2A, R::kExpert, R::kCombineA2A});
}
bool esp(OpRole r) {
  return in(r, {R::kDispatchEspAllGather, R::kDispatchEspAllGatherCopy, R::kCombineEspReduceScatter,
                R::kCombineEspAllReduce});
}
bool token_path(OpRole r) {
  return family(r) == OpFamily::kTokenPath;
}
bool expert_transfer(OpRole r) {
  return family(r) == OpFamily::kExpertTransfer;
}
bool placement(OpRole r) {
  return family(r) == OpFamily::kPlacement;
}

// Why a path's unbound ops cannot run there: what the executor's kernels for it assume.
std::string_view reason(Executor e, MoePath path) {
  if (path == MoePath::kSamples) {
    if (e == Executor::kTorchLayer)
      return "placement=netmoe moves samples: use moecomm.torch.SampleMovingMoE";
    return "placement=netmoe moves whole samples over the EP group: no ESP split, no TP "
           "gather, no expert transfer";
  }
  if (e == Executor::kRuntime)
    return "expert_transfer=hybrid runs on the plain EP token path: no ESP or TP collectives";
  return "expert_transfer=hybrid runs without ESP here (esp = 1)";
}

std::string_view executor_name(Executor e) {
  switch (e) {
    case Executor::kRuntime:
      return "the schedule runtime";
    case Executor::kTorchLayer:
      return "moecomm.torch.MoELayer";
    case Executor::kTorchSampleMoving:
      return "moecomm.torch.SampleMovingMoE";
  }
  return "?";
}

constexpr uint8_t bit(Executor e) {
  return uint8_t(1u << int(e));
}
constexpr uint8_t kRt = bit(Executor::kRuntime);
constexpr uint8_t kSamplesMoved = bit(Executor::kRuntime) | bit(Executor::kTorchSampleMoving);
constexpr uint8_t kAll = kRt | bit(Executor::kTorchLayer) | bit(Executor::kTorchSampleMoving);

bool netmoe(const Strategy& s) {
  return s.placement == Placement::kNetMoe;
}
bool hybrid(const Strategy& s) {
  return s.expert_transfer == ExpertTransfer::kHybrid;
}
// Whether the token rows travel as `dtype` in either direction (a2a_dtype).
bool wire_has(const Strategy& s, core::Dtype dtype) {
  return s.a2a_dtype && (s.a2a_dtype->dispatch == dtype || s.a2a_dtype->combine == dtype);
}
bool wire_narrowed(const Strategy& s) {
  return wire_has(s, core::Dtype::kBf16) || wire_has(s, core::Dtype::kFp8);
}
constexpr uint8_t kTorch = bit(Executor::kTorchLayer) | bit(Executor::kTorchSampleMoving);

// The semantic rules, each once: the executors it binds, when it applies, what to change.
struct Rule {
  uint8_t executors;
  bool (*applies)(const Strategy&, const RunFacts&);
  const char* where;
  std::string (*why)(const Strategy&, const RunFacts&);
};

const Rule kRules[] = {
    // NetMoE inlines the expert residual into the moved samples (nn/sample_moving_moe.h).
    {kSamplesMoved, [](const Strategy& s, const RunFacts& f) { return netmoe(s) && f.tp != 1; },
     "strategy: tp",
     [](const Strategy&, const RunFacts& f) {
       return "placement=netmoe runs with tp=1 only, got tp=" + std::to_string(f.tp);
     }},
    {kSamplesMoved,
     [](const Strategy& s, const RunFacts& f) { return netmoe(s) && f.capacity_factor > 0; },
     "strategy: placement",
     [](const Strategy&, const RunFacts& f) {
       return "placement=netmoe inlines the expert residual, which needs the dropless layout "
              "(capacity_factor 0, got " +
              std::to_string(f.capacity_factor) + ")";
     }},
    {kSamplesMoved,
     [](const Strategy& s, const RunFacts& f) { return netmoe(s) && !f.token_choice_gate; },
     "strategy: placement",
     [](const Strategy&, const RunFacts&) {
       return std::string(
           "placement=netmoe needs a token-choice gate, not expert choice (expert choice "
           "drops tokens; the residual rides on each token's first slot)");
     }},
    {kSamplesMoved,
     [](const Strategy& s, const RunFacts& f) { return netmoe(s) && f.records_routing; },
     "--record-routing",
     [](const Strategy&, const RunFacts&) {
       return std::string("placement=netmoe does not record routing yet");
     }},
    // The runtime's HybridRemap and expert codec address EP members of a tp=1 layout, and its
    // expert copies arrive once per step, before the first pipelined chunk.
    {kRt, [](const Strategy& s, const RunFacts& f) { return hybrid(s) && f.tp != 1; },
     "strategy: tp",
     [](const Strategy&, const RunFacts& f) {
       return "expert_transfer=hybrid runs with tp=1 only for now, got tp=" + std::to_string(f.tp);
     }},
    {kRt,
     [](const Strategy& s, const RunFacts&) {
       return hybrid(s) && !s.pipeline_experts && (s.chunks_fwd != 1 || s.chunks_bwd != 1);
     },
     "strategy: chunks",
     [](const Strategy&, const RunFacts&) {
       return std::string(
           "expert_transfer=hybrid pipelines its chunks through the experts only "
           "(pipeline_experts=true)");
     }},
    // ZeRO (Rajbhandari et al. 2020) shards the gradients, Adam's states or the parameters
    // over the data-parallel group. The runtime's GradBinding AllReduces whole gradients
    // (grad.*.allreduce only) and its nn::Adam updates every parameter of the rank;
    // moecomm.torch's GradSync AllReduces whole gradients and leaves the optimizer to PyTorch.
    {kAll, [](const Strategy& s, const RunFacts&) { return s.zero > 0; }, "strategy: zero",
     [](const Strategy& s, const RunFacts&) {
       return "zero=" + std::to_string(s.zero) +
              " shards the data-parallel gradients, optimizer states or parameters, which the "
              "schedule runtime and moecomm.torch do not run (zero=0 only); the simulator prices "
              "it";
     }},
    // dedup sends a token once per node and member and reduces the outputs per token on the
    // way back (sched/a2a_routing.h, node_block_pairs): the executors run it on the plain EP
    // token path, whose rows reach the sources whole. MoNTA's TP parts and the ESP split send
    // parts of the rows and gather or reduce them outside the A2A.
    {kAll,
     [](const Strategy& s, const RunFacts& f) {
       return s.a2a == Algorithm::kDedup && (f.tp != 1 || f.esp != 1);
     },
     "strategy: a2a",
     [](const Strategy&, const RunFacts& f) {
       return "a2a=dedup runs with tp=1 and esp=1 in the schedule runtime and moecomm.torch "
              "(got tp=" +
              std::to_string(f.tp) + ", esp=" + std::to_string(f.esp) +
              "): its rows are reduced per token on the way back; the simulator prices it with "
              "MoNTA's drop";
     }},
    // Per-level domains follow the cluster's levels (Sec. IV-A's location renumbering).
    {kAll,
     [](const Strategy& s, const RunFacts& f) {
       return hybrid(s) && !s.hybrid_levels.empty() && !f.cluster_given;
     },
     "strategy: hybrid_levels",
     [](const Strategy&, const RunFacts&) {
       return std::string(
           "expert_transfer=hybrid needs the cluster (--cluster) to place its per-level "
           "domains");
     }},
    // The wire dtype of the token rows: the runtime converts them around its MPI A2As
    // (rt/bf16_wire.h), which have no fp8 type, and only where no other collective moves or
    // sums them; moecomm.torch sends its tensors' own dtype.
    {kRt, [](const Strategy& s, const RunFacts&) { return wire_has(s, core::Dtype::kFp8); },
     "strategy: a2a_dtype",
     [](const Strategy& s, const RunFacts&) {
       return "a2a_dtype=" + to_string(*s.a2a_dtype) +
              ": the schedule runtime sends token rows as fp32 or bf16 (MPI has no fp8 type); "
              "the simulator prices fp8";
     }},
    {kRt,
     [](const Strategy& s, const RunFacts& f) {
       return wire_narrowed(s) && (f.tp != 1 || hybrid(s) || netmoe(s));
     },
     "strategy: a2a_dtype",
     [](const Strategy& s, const RunFacts& f) {
       return "a2a_dtype=" + to_string(*s.a2a_dtype) +
              ": bf16 token rows run on the plain EP A2A only (tp=1, no HybridEP or NetMoE), "
              "got tp=" +
              std::to_string(f.tp) + (hybrid(s) ? ", expert_transfer=hybrid" : "") +
              (netmoe(s) ? ", placement=netmoe" : "");
     }},
    {kTorch, [](const Strategy& s, const RunFacts&) { return wire_narrowed(s); },
     "strategy: a2a_dtype",
     [](const Strategy& s, const RunFacts&) {
       return "a2a_dtype=" + to_string(*s.a2a_dtype) +
              ": moecomm.torch sends token rows as fp32 (it has no bf16 wire path, and no fp8 "
              "one: torch has no float8 dtype before 2.1); use a2a_dtype=fp32 here, `moecomm "
              "train` for bf16, the simulator for fp8";
     }},
};

}  // namespace

std::string_view to_string(Executor executor) {
  return kNames[size_t(executor)];
}

std::optional<Executor> executor_from_string(std::string_view name) {
  for (int i = 0; i < kNumExecutors; ++i)
    if (kNames[size_t(i)] == name) return Executor(i);
  return std::nullopt;
}

std::string_view to_string(MoePath path) {
  switch (path) {
    case MoePath::kTokens:
      return "tokens";
    case MoePath::kExpertTransfer:
      return "expert_transfer";
    case MoePath::kSamples:
      return "samples";
  }
  return "?";
}

MoePath moe_path(const Schedule& schedule) {
  bool experts = false;
  for (const Label& l : schedule.labels()) {
    if (placement(l.role)) return MoePath::kSamples;
    experts |= expert_transfer(l.role);
  }
  return experts ? MoePath::kExpertTransfer : MoePath::kTokens;
}

bool binds(Executor executor, MoePath path, OpRole role) {
  // The dense part, the pipeline, the gradient sync and the optimizer are the bindings' own
  // business: rt's ModelBinding::check_ops names any op it has no kernel or buffer for (the
  // optimizer op: LayerSetup::optimizer, which the runtime leaves off and steps nn::Adam after
  // the schedule). ZeRO's sharded ops are refused by the zero rule above, before any is built.
  if (!is_moe_family(family(role))) return true;
  switch (executor) {
    case Executor::kRuntime:
      // TokenPathBinding runs every token-path op; ExpertTransferBinding's domains and
      // NetMoeBinding's moved samples sit on the plain EP A2As.
      if (path == MoePath::kTokens) return token_path(role);
      if (path == MoePath::kExpertTransfer) return plain_ep(role) || expert_transfer(role);
      return plain_ep(role) || placement(role);
    case Executor::kTorchLayer:
      if (path == MoePath::kExpertTransfer)
        return (token_path(role) && !esp(role)) || expert_transfer(role);
      return token_path(role);  // placement: SampleMovingMoE's
    case Executor::kTorchSampleMoving:
      return path == MoePath::kSamples && (plain_ep(role) || placement(role));
  }
  return false;
}

std::vector<Label> unbound_ops(const Schedule& schedule, Executor executor) {
  const MoePath path = moe_path(schedule);
  std::vector<Label> out;
  // Per (role, phase, knob), its place in `out`, which keeps the lowest layer (the backward
  // pass builds its layers last to first).
  std::map<std::tuple<OpRole, Phase, std::string>, size_t> at;
  for (const Label& l : schedule.labels()) {
    if (binds(executor, path, l.role)) continue;
    const auto [it, fresh] = at.try_emplace({l.role, l.phase, l.knob}, out.size());
    if (fresh) {
      out.push_back(l);
      out.back().chunk = -1;
    } else if (l.layer < out[it->second].layer) {
      out[it->second].layer = l.layer;
    }
  }
  return out;
}

std::optional<Refusal> semantic_refusal(const Strategy& strategy, const RunFacts& facts,
                                        Executor executor) {
  for (const Rule& rule : kRules)
    if ((rule.executors & bit(executor)) && rule.applies(strategy, facts))
      return Refusal{rule.where, rule.why(strategy, facts)};
  return std::nullopt;
}

std::optional<Refusal> op_refusal(const Schedule& schedule, Executor executor) {
  const std::vector<Label> unbound = unbound_ops(schedule, executor);
  if (unbound.empty()) return std::nullopt;
  if (executor == Executor::kTorchSampleMoving && moe_path(schedule) != MoePath::kSamples)
    return Refusal{"strategy: placement",
                   "has no placement=netmoe, so moecomm.torch.SampleMovingMoE binds none of "
                   "its MoE ops (moecomm.torch.MoELayer runs the strategies that keep samples "
                   "home)"};
  std::string why = std::string(executor_name(executor)) + " cannot bind ";
  for (size_t i = 0; i < unbound.size(); ++i) why += (i ? ", " : "") + to_string(unbound[i]);
  why += " (" + std::string(reason(executor, moe_path(schedule))) + ")";
  return Refusal{"strategy", why};
}

std::optional<Refusal> refusal(const Schedule& schedule, const Strategy& strategy,
                               const RunFacts& facts, Executor executor) {
  if (auto r = semantic_refusal(strategy, facts, executor)) return r;
  return op_refusal(schedule, executor);
}

}  // namespace moecomm::sched
