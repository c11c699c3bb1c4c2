#include "plan/search_space.h"

#include <functional>

#include "core/error.h"
#include "core/rank_groups.h"
#include "plan/moe_workload.h"

namespace moecomm::plan {

namespace {

using sched::Strategy;

std::vector<int> divisors(int n) {
  std::vector<int> out;
  for (int d = 1; d <= n; ++d)
    if (n % d == 0) out.push_back(d);
  return out;
}

// Every value of one knob, set by `set`, as one dimension.
template <class T>
std::vector<Candidate> vary(const Candidate& from, const std::vector<T>& values,
                            const std::function<void(Strategy&, T)>& set) {
  std::vector<Candidate> out;
  for (const T& v : values) {
    Candidate c = from;
    set(c.strategy, v);
    out.push_back(std::move(c));
  }
  return out;
}

// Every A2A algorithm the a2a knob accepts.
std::vector<Candidate> a2a_dimension(const Candidate& from) {
  std::vector<sched::Algorithm> algorithms;
  for (const std::string& name : sched::a2a_algorithm_names())
    algorithms.push_back(sched::parse_a2a_algorithm(name, "a2a"));
  return vary<sched::Algorithm>(from, algorithms,
                                [](Strategy& s, sched::Algorithm a) { s.a2a = a; });
}

// Replicated dispatch or MoNTA's drop + AllGather (only where tokens are TP-replicated);
// the copy pipelining of O3 needs the drop, so leaving it turns O3 off.
std::vector<Candidate> dispatch_dimension(const Candidate& from) {
  if (from.parallel.tp == 1 && from.parallel.esp == 1) return {};
  return vary<sched::TpDispatch>(from,
                                 {sched::TpDispatch::kReplicate, sched::TpDispatch::kDropAllGather},
                                 [](Strategy& s, sched::TpDispatch d) {
                                   s.tp_dispatch = d;
                                   if (d == sched::TpDispatch::kReplicate)
                                     s.copy_pipelining = false;
                                 });
}

std::vector<Candidate> chunk_dimension(const Candidate& from, bool forward) {
  return vary<int>(from, {std::begin(kSearchChunks), std::end(kSearchChunks)},
                   [forward](Strategy& s, int n) { (forward ? s.chunks_fwd : s.chunks_bwd) = n; });
}

// Experts per chunk (FSMoE, Lina) or after every chunk (MoNTA O2), and MoNTA O3's copy
// pipelining, which needs the latter and the drop dispatch.
std::vector<Candidate> overlap_dimension(const Candidate& from) {
  struct Overlap {
    bool pipeline_experts, copy_pipelining;
  };
  std::vector<Overlap> values = {{true, false}, {false, false}};
  if (from.strategy.tp_dispatch == sched::TpDispatch::kDropAllGather)
    values.push_back({false, true});
  return vary<Overlap>(from, values, [](Strategy& s, Overlap o) {
    s.pipeline_experts = o.pipeline_experts;
    s.copy_pipelining = o.copy_pipelining;
  });
}

std::vector<Candidate> grad_sync_dimension(const Candidate& from) {
  std::vector<Candidate> out = vary<sched::GradSync>(
      from, {sched::GradSync::kBucketed, sched::GradSync::kLina, sched::GradSync::kFsmoe},
      [](Strategy& s, sched::GradSync g) { s.grad_sync = g; });
  if (from.strategy.grad_sync == sched::GradSync::kBucketed) return out;
  for (int n : kSearchGradPartitions) {
    Candidate c = from;
    c.strategy.grad_partitions = n;
    out.push_back(std::move(c));
  }
  return out;
}

// HybridEP's domains: none (plain EP), blocks of d consecutive EP ranks, or a size per level
// the EP group spans (sub-grids placed by location renumbering).
std::vector<Candidate> domain_dimension(const Candidate& from, const PlanInput& in) {
  std::vector<Candidate> out;
  Candidate none = from;
  none.strategy.expert_transfer = sched::ExpertTransfer::kNone;
  out.push_back(none);
  auto hybrid = [&](int domain, std::vector<int> levels) {
    Candidate c = from;
    c.strategy.expert_transfer = sched::ExpertTransfer::kHybrid;
    c.strategy.hybrid_domain = domain;
    c.strategy.hybrid_levels = std::move(levels);
    out.push_back(std::move(c));
  };
  for (int d : divisors(from.parallel.ep))
    if (d > 1) hybrid(d, {});
  const core::Topology topology(in.cluster);
  const auto span = core::group_span(topology, core::build_rank_groups(from.parallel).ep.front());
  if (!span || span->counts.size() < 2) return out;
  std::vector<int> sizes(span->counts.size(), 1);
  std::function<void(size_t)> grid = [&](size_t level) {
    if (level == sizes.size()) {
      int product = 1;
      for (int s : sizes) product *= s;
      if (product > 1) hybrid(product, sizes);
      return;
    }
    for (int s : divisors(span->counts[level])) {
      sizes[level] = s;
      grid(level + 1);
    }
  };
  grid(0);
  return out;
}

std::vector<Candidate> compression_dimension(const Candidate& from) {
  if (from.strategy.expert_transfer != sched::ExpertTransfer::kHybrid) return {};
  return vary<double>(from, {1.0, kSearchCompression},
                      [](Strategy& s, double c) { s.compression = c; });
}

// MoNTA's communication priority (EP > PP > CP > DP) or fair sharing.
std::vector<Candidate> priority_dimension(const Candidate& from) {
  return vary<sched::CommPriority>(from, {sched::CommPriority::kNone, sched::CommPriority::kMonta},
                                   [](Strategy& s, sched::CommPriority p) { s.comm_priority = p; });
}

// MoNTA's cluster expansion with context parallelism: CP aligned with EP or orthogonal to it
// (layouts the sizes cannot fold are refused by the pricer).
std::vector<Candidate> cp_layout_dimension(const Candidate& from) {
  if (from.parallel.cp == 1) return {};
  std::vector<Candidate> out;
  for (auto layout : {core::CpLayout::kVertical, core::CpLayout::kHorizontal}) {
    Candidate c = from;
    c.parallel.cp_layout = layout;
    out.push_back(std::move(c));
  }
  return out;
}

// Lina's expert packing (Sec. 4.2): fewer EP ranks, more experts on each; edp grows.
std::vector<Candidate> ep_dimension(const Candidate& from, const PlanInput& in) {
  std::vector<Candidate> out;
  for (int ep : divisors(static_cast<int>(in.model.experts))) {
    auto parallel = with_ep(in, ep);
    if (!parallel) continue;
    Candidate c = from;
    c.parallel = *parallel;
    out.push_back(std::move(c));
  }
  return out;
}

}  // namespace

std::vector<std::vector<Candidate>> knob_dimensions(const Candidate& from, const PlanInput& in) {
  std::vector<std::vector<Candidate>> dims = {
      a2a_dimension(from),          dispatch_dimension(from),    chunk_dimension(from, true),
      chunk_dimension(from, false), overlap_dimension(from),     grad_sync_dimension(from),
      domain_dimension(from, in),   compression_dimension(from), priority_dimension(from),
      cp_layout_dimension(from),    ep_dimension(from, in)};
  for (auto& dim : dims)
    for (auto& c : dim) c.strategy.name = "searched";
  return dims;
}

}  // namespace moecomm::plan
