#include "plan/estimate_params.h"

#include <string>

namespace moecomm::plan {

namespace {

// JSON holds the enums by the names --strategy accepts.
template <class E>
std::string name_of(E value) {
  return std::string(sched::to_string(value));
}

void add_monta(nlohmann::json& j, const MontaFigures& m) {
  j["monta_baseline_a2a_ms"] = m.baseline_a2a_s * 1e3;
  j["i_minimal_bytes"] = m.i_minimal_bytes;
  j["latency_ms"] = m.latency_s * 1e3;
  j["tokens_per_s"] = m.tokens_per_s;
  j["mfu"] = m.mfu;
  if (!m.choice.empty()) j["monta_choice"] = m.choice;
}

void add_lina(nlohmann::json& j, const LinaFigures& l) {
  j["microop_bytes"] = l.microop_bytes;
  j["experts_per_device"] = l.experts_per_device;
  j["ep_group"] = l.ep_group;
  j["a2a_blocked_ms"] = l.a2a_blocked_s * 1e3;
}

void add_hybridep(nlohmann::json& j, const HybridEpFigures& h) {
  j["p"] = h.p;
  j["allgather_ms"] = h.allgather_s * 1e3;
  j["a2a_pairs"] = h.a2a_pairs;
  j["allgather_pairs"] = h.allgather_pairs;
  j["paper_eq8_hybrid_levels"] = h.paper_eq8_hybrid_levels;
}

}  // namespace

nlohmann::json knob_changes(const sched::Strategy& s) {
  const sched::Strategy base;
  nlohmann::json j = nlohmann::json::object();
  const auto put = [&j](const char* knob, bool differs, nlohmann::json value) {
    if (differs) j[knob] = std::move(value);
  };
  put("placement", s.placement != base.placement, name_of(s.placement));
  put("a2a", s.a2a != base.a2a, name_of(s.a2a));
  put("tp_dispatch", s.tp_dispatch != base.tp_dispatch, name_of(s.tp_dispatch));
  put("chunks_fwd", s.chunks_fwd != base.chunks_fwd, s.chunks_fwd);
  put("chunks_bwd", s.chunks_bwd != base.chunks_bwd, s.chunks_bwd);
  put("pipeline_experts", s.pipeline_experts != base.pipeline_experts, s.pipeline_experts);
  put("copy_pipelining", s.copy_pipelining != base.copy_pipelining, s.copy_pipelining);
  put("grad_sync", s.grad_sync != base.grad_sync, name_of(s.grad_sync));
  put("grad_partitions", s.grad_partitions != base.grad_partitions, s.grad_partitions);
  put("expert_transfer", s.expert_transfer != base.expert_transfer, name_of(s.expert_transfer));
  put("hybrid_domain", s.hybrid_domain != base.hybrid_domain, s.hybrid_domain);
  put("hybrid_levels", s.hybrid_levels != base.hybrid_levels, s.hybrid_levels);
  put("compression", s.compression != base.compression, s.compression);
  put("shared_expert", s.shared_expert != base.shared_expert, s.shared_expert);
  put("sr_feedback", s.sr_feedback != base.sr_feedback, s.sr_feedback);
  put("comm_priority", s.comm_priority != base.comm_priority, name_of(s.comm_priority));
  return j;
}

nlohmann::json estimate_params(const StrategyEstimate& e) {
  nlohmann::json j = knob_changes(e.knobs);
  if (e.a2a_s) j["a2a_ms"] = *e.a2a_s * 1e3;
  if (e.hierarchical) {
    j["nodes"] = e.hierarchical->nodes;
    j["ranks_per_node"] = e.hierarchical->ranks_per_node;
  }
  if (e.monta) add_monta(j, *e.monta);
  if (e.fsmoe) {
    j["case_forward"] = static_cast<int>(e.fsmoe->case_forward);
    j["chunks_fwd_relaxed"] = e.fsmoe->chunks_fwd_relaxed;
  }
  if (e.lina) add_lina(j, *e.lina);
  if (e.hybridep) add_hybridep(j, *e.hybridep);
  return j;
}

}  // namespace moecomm::plan
