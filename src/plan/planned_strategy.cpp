#include "plan/planned_strategy.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <vector>

#include "core/error.h"
#include "core/topology.h"
#include "cost/collective_model.h"
#include "plan/estimates.h"
#include "plan/lina_planner.h"
#include "plan/moe_workload.h"

namespace moecomm::plan {

namespace {

using sched::Strategy;

// The knobs each paper method's estimate tunes; other methods have nothing to plan.
const std::map<std::string, std::vector<std::string>>& tuned_knobs() {
  static const std::map<std::string, std::vector<std::string>> table = {
      {"monta-o2", {"chunks_fwd", "chunks_bwd"}},
      {"monta-o3", {"chunks_fwd", "chunks_bwd"}},
      {"fsmoe", {"chunks_fwd", "chunks_bwd", "grad_partitions"}},
      {"lina", {"grad_partitions", "chunks_fwd", "chunks_bwd"}},
      {"hybridep", {"hybrid_domain", "compression"}},
  };
  return table;
}

std::string number(double v) {
  char text[32];
  std::snprintf(text, sizeof text, "%.4g", v);
  return text;
}

// The knob value of `knob` in `s`, as to_string prints it.
std::string value_of(const Strategy& s, const std::string& knob) {
  if (knob == "chunks_fwd") return std::to_string(s.chunks_fwd);
  if (knob == "chunks_bwd") return std::to_string(s.chunks_bwd);
  if (knob == "grad_partitions") return std::to_string(s.grad_partitions);
  if (knob == "hybrid_domain") return std::to_string(s.hybrid_domain);
  return number(s.compression);
}

// Writes planned values into the knobs the user left open, one note line each.
struct Filler {
  Strategy s;
  const sched::ParsedStrategy& parsed;
  std::string* notes;

  bool open(const std::string& knob) const { return !parsed.is_explicit(knob); }
  void note(const std::string& line) {
    if (notes) *notes += line + "\n";
  }
  void set(const std::string& knob, int& field, long long value, int cap,
           const std::string& source) {
    if (!open(knob)) return;
    const long long v = std::clamp<long long>(value, 1, cap);
    field = static_cast<int>(v);
    note(knob + "=" + std::to_string(v) + " from " + source +
         (v != value ? " (planned " + std::to_string(value) + ", clamped)" : ""));
  }
  void set(const std::string& knob, double& field, double value, const std::string& source) {
    if (!open(knob)) return;
    field = value;
    note(knob + "=" + number(value) + " from " + source);
  }
  void keep(const std::string& knob, const std::string& why) {
    if (open(knob)) note(knob + "=" + value_of(s, knob) + " kept (the named default): " + why);
  }
};

const StrategyEstimate* find_estimate(const ModelEstimates& plan, const std::string& name) {
  for (const auto& e : plan.strategies)
    if (e.name == name) return &e;
  return nullptr;
}

std::string skip_reason(const ModelEstimates& plan, const std::string& name) {
  for (const auto& s : plan.skipped)
    if (s.name == name) return s.reason;
  return "no estimate";
}

// The estimate's own workload (the gradient bytes and groups its micro-ops are cut from).
MoeWorkload workload_of(const PlanInput& in) {
  const core::Topology topo(in.cluster);
  const cost::CollectiveModel comm(topo);
  return derive_workload(in, comm);
}

// MoNTA O2 runs Algorithm 1, O3 Algorithm 2 (the copy pipelined); both pick one N for both
// A2As of the layer, forward and backward.
void fill_monta(Filler& f, const StrategyEstimate& e) {
  const std::string source = std::string("MoNTA Algorithm ") + (e.name == "monta-o3" ? "2" : "1") +
                             " (N, " + e.name + " estimate)";
  f.set("chunks_fwd", f.s.chunks_fwd, e.knobs.chunks_fwd, sched::kMaxChunks, source);
  f.set("chunks_bwd", f.s.chunks_bwd, e.knobs.chunks_bwd, sched::kMaxChunks, source);
}

void fill_fsmoe(Filler& f, const StrategyEstimate& e) {
  f.set("chunks_fwd", f.s.chunks_fwd, e.knobs.chunks_fwd, sched::kMaxChunks,
        "FSMoE Sec. 4 (optimal forward pipeline degree r)");
  // With data parallelism the backward degree is re-chosen per layer for the AllReduce time
  // the gradient partition gives it (Sec. 5, Eq. 5); the knob is one degree for every layer.
  const bool partitioned = e.knobs.grad_sync == sched::GradSync::kFsmoe;
  f.set("chunks_bwd", f.s.chunks_bwd, e.knobs.chunks_bwd, sched::kMaxChunks,
        partitioned ? "FSMoE Sec. 5 (the backward degree r most layers take with the gradient "
                      "AllReduce partitioned into their windows)"
                    : "FSMoE Sec. 4 (optimal backward pipeline degree r)");
  f.keep("grad_partitions",
         "the FSMoE estimate assigns gradient bytes to each layer's window (Sec. 5, Eq. 5), "
         "not a piece count");
}

// Lina Sec. 4.2 cuts each gradient tensor into equal micro-ops of at most microop_bytes
// (lina_partition, as the estimate does); the knob cuts both of a layer's tensors (dense over
// dp x cp, expert over edp) into the same count, so the larger synchronized tensor sets it.
void fill_lina(Filler& f, const LinaFigures& lina, const PlanInput& in) {
  const double microop = lina.microop_bytes;
  if (f.open("grad_partitions")) {
    // The gradients of the packed layout the estimate priced (Lina Sec. 4.2).
    PlanInput packed = in;
    if (auto p = with_ep(in, lina.ep_group)) packed.parallel = *p;
    const MoeWorkload w = workload_of(packed);
    const std::pair<double, size_t> tensors[] = {
        {w.dense_grad_bytes, w.groups.dp_cp.front().size()},
        {w.expert_grad_bytes, w.groups.edp.front().size()}};
    long long count = 0;
    double largest = 0;
    for (const auto& [bytes, ranks] : tensors) {
      if (ranks < 2) continue;  // nothing to AllReduce
      count = std::max(count, lina_partition(bytes, microop).count);
      largest = std::max(largest, bytes);
    }
    if (count == 0)
      f.keep("grad_partitions", "no data-parallel gradient sync here (dp x cp = edp = 1)");
    else
      f.set("grad_partitions", f.s.grad_partitions, count, sched::kMaxGradPartitions,
            "Lina Sec. 4.2 (" + number(microop / 1e6) + " MB micro-ops on the " +
                number(largest / 1e6) + " MB layer gradient)");
  }
  for (const char* knob : {"chunks_fwd", "chunks_bwd"})
    f.keep(knob, "the Lina estimate gives no A2A/FFN micro-op count");
}

std::string join(const std::vector<int>& v) {
  std::string out;
  for (int x : v) {
    if (!out.empty()) out += 'x';
    out += std::to_string(x);
  }
  return out;
}

// HybridEP plans a domain size per level of the EP group: hybrid_levels, placed by location
// renumbering (sched::hybrid_member_order), with hybrid_domain their product.
void fill_hybridep(Filler& f, const StrategyEstimate& e, const PlanInput& in) {
  if (f.open("hybrid_domain") && f.open("hybrid_levels")) {
    const std::vector<int>& sizes = e.knobs.hybrid_levels;
    const core::Topology topo(in.cluster);
    const auto span = group_span(topo, workload_of(in).groups.ep.front());
    const std::string source =
        "HybridEP Sec. IV-A (" + e.name + " estimate: domain sizes per level, outermost first)";
    if (span && span->counts.size() == sizes.size()) {
      f.s.hybrid_levels = sizes;
      f.s.hybrid_domain = e.knobs.hybrid_domain;  // the sizes' product
      f.note("hybrid_levels=" + join(sizes) +
             " (hybrid_domain=" + std::to_string(f.s.hybrid_domain) + ") from " + source);
    } else {
      f.set("hybrid_domain", f.s.hybrid_domain, 1, 1'000'000,
            source + "; the EP group is no sub-grid of the levels");
    }
  }
  // The knob is the bytes sent per parameter byte, 1 / SR (HybridEP Sec. III-D).
  f.set("compression", f.s.compression, e.knobs.compression,
        "HybridEP Sec. III-D (SR " + number(1.0 / e.knobs.compression) + ", " + e.name +
            " estimate)");
}

// The user who compressed the experts gets the domains the planner chose for compressed
// experts (the hybridep-sr row, SR = kHybridEpCompression).
std::string hybridep_row(const sched::ParsedStrategy& parsed, const ModelEstimates& plan) {
  const bool compressed = parsed.is_explicit("compression") && parsed.strategy.compression < 1;
  return compressed && find_estimate(plan, "hybridep-sr") ? "hybridep-sr" : "hybridep";
}

}  // namespace

namespace {

const std::vector<std::string>* knobs_to_plan(const sched::ParsedStrategy& parsed) {
  const auto tuned = tuned_knobs().find(parsed.method);
  if (tuned == tuned_knobs().end()) return nullptr;
  const auto& knobs = tuned->second;
  const bool any_open = std::any_of(knobs.begin(), knobs.end(),
                                    [&](const std::string& k) { return !parsed.is_explicit(k); });
  return any_open ? &knobs : nullptr;
}

}  // namespace

std::vector<std::string> open_planned_knobs(const sched::ParsedStrategy& parsed) {
  std::vector<std::string> open;
  if (const std::vector<std::string>* tuned = knobs_to_plan(parsed))
    for (const auto& knob : *tuned)
      if (!parsed.is_explicit(knob)) open.push_back(knob);
  return open;
}

Strategy planned_strategy(const sched::ParsedStrategy& parsed, const PlanInput& input,
                          std::string* notes) {
  if (!knobs_to_plan(parsed)) return parsed.strategy;
  return planned_strategy(parsed, input, estimate_strategies(input), notes);
}

Strategy planned_strategy(const sched::ParsedStrategy& parsed, const PlanInput& input,
                          const ModelEstimates& plan, std::string* notes) {
  const std::vector<std::string>* tuned = knobs_to_plan(parsed);
  if (!tuned) return parsed.strategy;
  Filler f{parsed.strategy, parsed, notes};
  const std::string row = parsed.method == "hybridep" ? hybridep_row(parsed, plan) : parsed.method;
  const StrategyEstimate* e = find_estimate(plan, row);
  if (!e) {
    for (const auto& knob : *tuned)
      f.keep(knob, "the planner skipped " + row + " (" + skip_reason(plan, row) + ")");
    return f.s;
  }
  if (row.rfind("monta-", 0) == 0)
    fill_monta(f, *e);
  else if (row == "fsmoe")
    fill_fsmoe(f, *e);
  else if (row == "lina")
    fill_lina(f, *e->lina, input);
  else
    fill_hybridep(f, *e, input);
  sched::validate(f.s, "planned strategy " + f.s.name);
  return f.s;
}

std::optional<core::ParallelConfig> lina_packed_parallel(const PlanInput& input,
                                                         const ModelEstimates& estimates,
                                                         std::string* note) {
  const StrategyEstimate* e = find_estimate(estimates, "lina");
  if (!e || !e->lina) return std::nullopt;
  const int ep = e->lina->ep_group;
  if (ep == input.parallel.ep) return std::nullopt;
  auto packed = with_ep(input, ep);
  if (packed && note)
    *note = "ep=" + std::to_string(ep) +
            " from Lina Sec. 4.2 (expert packing: " + std::to_string(input.model.experts / ep) +
            " experts per device)";
  return packed;
}

}  // namespace moecomm::plan
