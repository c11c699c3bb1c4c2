#include "sched/strategy.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <optional>
#include <sstream>

#include "core/error.h"
#include "core/item_list.h"
#include "core/suggest.h"
#include "sched/a2a_routing.h"

namespace moecomm::sched {
namespace {

std::string join(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& s : items) out += (out.empty() ? "" : ", ") + s;
  return out;
}

// One enum-valued knob: its spellings in order.
template <class E>
E pick(const std::vector<std::pair<std::string, E>>& values, const std::string& value,
       const std::string& where) {
  std::vector<std::string> names;
  for (const auto& [name, v] : values) {
    if (name == value) return v;
    names.push_back(name);
  }
  throw Error(where, "unknown value \"" + value + "\"" + core::did_you_mean(value, names) +
                         " (accepted: " + join(names) + ")");
}

const std::vector<std::pair<std::string, Placement>> kPlacements = {{"none", Placement::kNone},
                                                                    {"netmoe", Placement::kNetMoe}};
const std::vector<std::pair<std::string, Algorithm>> kAlgorithms = [] {
  std::vector<std::pair<std::string, Algorithm>> out;
  for (const A2AAlgorithmInfo& a : a2a_algorithms()) out.emplace_back(a.name, a.algorithm);
  return out;
}();
const std::vector<std::pair<std::string, TpDispatch>> kDispatches = {
    {"replicate", TpDispatch::kReplicate}, {"drop-allgather", TpDispatch::kDropAllGather}};
const std::vector<std::pair<std::string, GradSync>> kSyncs = {
    {"bucketed", GradSync::kBucketed}, {"lina", GradSync::kLina}, {"fsmoe", GradSync::kFsmoe}};
const std::vector<std::pair<std::string, ExpertTransfer>> kTransfers = {
    {"none", ExpertTransfer::kNone}, {"hybrid", ExpertTransfer::kHybrid}};
const std::vector<std::pair<std::string, CommPriority>> kPriorities = {
    {"none", CommPriority::kNone}, {"monta", CommPriority::kMonta}};
const std::vector<std::pair<std::string, PpSchedule>> kPpSchedules = {
    {"gpipe", PpSchedule::kGpipe},
    {"1f1b", PpSchedule::k1F1B},
    {"interleaved:V", PpSchedule::kInterleaved}};
const std::vector<std::pair<std::string, bool>> kBools = {{"true", true}, {"false", false}};

template <class E>
std::string_view name_of(const std::vector<std::pair<std::string, E>>& values, E v) {
  for (const auto& [name, value] : values)
    if (value == v) return name;
  return "?";
}

int parse_int(const std::string& value, int lo, int hi, const std::string& where) {
  size_t used = 0;
  long long v = 0;
  try {
    v = std::stoll(value, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != value.size())
    throw Error(where, "must be an integer, got \"" + value + "\"");
  if (v < lo || v > hi)
    throw Error(
        where, "must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got " + value);
  return static_cast<int>(v);
}

// "2x1": one positive size per level; sets hybrid_domain to their product.
void parse_levels(Strategy& s, const std::string& value, const std::string& where) {
  s.hybrid_levels.clear();
  long long product = 1;
  size_t at = 0;
  do {
    const size_t x = value.find('x', at);
    s.hybrid_levels.push_back(parse_int(value.substr(at, x - at), 1, 1'000'000, where));
    product *= s.hybrid_levels.back();
    if (product > 1'000'000) throw Error(where, "the sizes' product exceeds 1000000: " + value);
    at = x == std::string::npos ? x : x + 1;
  } while (at != std::string::npos);
  s.hybrid_domain = static_cast<int>(product);
}

double parse_ratio(const std::string& value, const std::string& where) {
  size_t used = 0;
  double v = 0;
  try {
    v = std::stod(value, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != value.size())
    throw Error(where, "must be a number, got \"" + value + "\"");
  if (!(v > 0 && v <= 1)) throw Error(where, "must be in (0, 1], got " + value);
  return v;
}

using Setter = std::function<void(Strategy&, const std::string& value, const std::string& where)>;

const std::map<std::string, Setter>& setters() {
  static const std::map<std::string, Setter> table = {
      {"name",
       [](Strategy& s, const std::string& v, const std::string& w) {
         if (v.empty()) throw Error(w, "must not be empty");
         s.name = v;
       }},
      {"placement", [](Strategy& s, const std::string& v,
                       const std::string& w) { s.placement = pick(kPlacements, v, w); }},
      {"a2a", [](Strategy& s, const std::string& v,
                 const std::string& w) { s.a2a = pick(kAlgorithms, v, w); }},
      {"a2a_dtype", [](Strategy& s, const std::string& v,
                       const std::string& w) { s.a2a_dtype = parse_a2a_dtype(v, w); }},
      {"tp_dispatch", [](Strategy& s, const std::string& v,
                         const std::string& w) { s.tp_dispatch = pick(kDispatches, v, w); }},
      {"chunks",
       [](Strategy& s, const std::string& v, const std::string& w) {
         s.chunks_fwd = s.chunks_bwd = parse_int(v, 1, kMaxChunks, w);
       }},
      {"chunks_fwd", [](Strategy& s, const std::string& v,
                        const std::string& w) { s.chunks_fwd = parse_int(v, 1, kMaxChunks, w); }},
      {"chunks_bwd", [](Strategy& s, const std::string& v,
                        const std::string& w) { s.chunks_bwd = parse_int(v, 1, kMaxChunks, w); }},
      {"pipeline_experts", [](Strategy& s, const std::string& v,
                              const std::string& w) { s.pipeline_experts = pick(kBools, v, w); }},
      {"copy_pipelining", [](Strategy& s, const std::string& v,
                             const std::string& w) { s.copy_pipelining = pick(kBools, v, w); }},
      {"grad_sync", [](Strategy& s, const std::string& v,
                       const std::string& w) { s.grad_sync = pick(kSyncs, v, w); }},
      {"grad_partitions",
       [](Strategy& s, const std::string& v, const std::string& w) {
         s.grad_partitions = parse_int(v, 1, kMaxGradPartitions, w);
       }},
      {"expert_transfer", [](Strategy& s, const std::string& v,
                             const std::string& w) { s.expert_transfer = pick(kTransfers, v, w); }},
      {"hybrid_domain",
       [](Strategy& s, const std::string& v, const std::string& w) {
         s.hybrid_domain = parse_int(v, 1, 1'000'000, w);
       }},
      {"hybrid_levels",
       [](Strategy& s, const std::string& v, const std::string& w) { parse_levels(s, v, w); }},
      {"compression", [](Strategy& s, const std::string& v,
                         const std::string& w) { s.compression = parse_ratio(v, w); }},
      {"shared_expert", [](Strategy& s, const std::string& v,
                           const std::string& w) { s.shared_expert = pick(kBools, v, w); }},
      {"sr_feedback", [](Strategy& s, const std::string& v,
                         const std::string& w) { s.sr_feedback = pick(kBools, v, w); }},
      {"comm_priority", [](Strategy& s, const std::string& v,
                           const std::string& w) { s.comm_priority = pick(kPriorities, v, w); }},
      {"recompute_experts", [](Strategy& s, const std::string& v,
                               const std::string& w) { s.recompute_experts = pick(kBools, v, w); }},
      {"pp_schedule",
       [](Strategy& s, const std::string& v, const std::string& w) { parse_pp_schedule(s, v, w); }},
      {"overlap_microbatches",
       [](Strategy& s, const std::string& v, const std::string& w) {
         s.overlap_microbatches = pick(kBools, v, w);
       }},
      {"zero", [](Strategy& s, const std::string& v,
                  const std::string& w) { s.zero = parse_int(v, 0, 3, w); }},
  };
  return table;
}

std::vector<std::string> knob_names() {
  std::vector<std::string> names = {"base"};
  for (const auto& [name, setter] : setters()) names.push_back(name);
  return names;
}

std::string knob_list() {
  return join(knob_names());
}

}  // namespace

std::vector<std::string> strategy_names() {
  return {"baseline", "hier-a2a", "monta-o1", "monta-o2", "monta-o3",
          "fsmoe",    "lina",     "hybridep", "netmoe"};
}

namespace {

std::string unknown_name(const std::string& name) {
  return "unknown strategy \"" + name + "\"" + core::did_you_mean(name, strategy_names()) +
         " (accepted: " + join(strategy_names()) + ", or knob=value,... with knobs " + knob_list() +
         ")";
}

// The paper settings; nullopt for an unknown name.
std::optional<Strategy> find_named(const std::string& name) {
  Strategy s;
  s.name = name;
  if (name == "baseline") return s;
  if (name == "hier-a2a") {  // Tutel's 2DH A2A
    s.a2a = Algorithm::k2DH;
  } else if (name == "monta-o1" || name == "monta-o2" || name == "monta-o3") {
    s.tp_dispatch = TpDispatch::kDropAllGather;  // MoNTA O1: Drop + A2A + AllGather
    if (name != "monta-o1") {
      s.chunks_fwd = s.chunks_bwd = 4;  // O2: N chunks (the planner picks N, Algorithm 1-2)
      s.pipeline_experts = false;       // MoNTA Fig. 15: experts wait for every chunk's copy
    }
    s.copy_pipelining = name == "monta-o3";
    s.comm_priority = CommPriority::kMonta;  // "Communication priority": EP > PP > CP > DP
  } else if (name == "fsmoe") {
    // FSMoE Fig. 2 and 3d: MP-split tokens through inter-node A2A, ESP-AllGather, experts,
    // ESP-ReduceScatter in r chunks; gradients partitioned into the overlap windows.
    s.a2a = Algorithm::k2DH;
    s.tp_dispatch = TpDispatch::kDropAllGather;
    s.chunks_fwd = s.chunks_bwd = 4;
    s.grad_sync = GradSync::kFsmoe;
    s.grad_partitions = 4;
  } else if (name == "lina") {  // Lina Sec. 4.1: A2A first, micro-ops; A2A/FFN pipelining
    s.grad_sync = GradSync::kLina;
    s.grad_partitions = 4;
    s.chunks_fwd = s.chunks_bwd = 2;
  } else if (name == "hybridep") {
    s.expert_transfer = ExpertTransfer::kHybrid;
  } else if (name == "netmoe") {
    s.placement = Placement::kNetMoe;
  } else {
    return std::nullopt;
  }
  return s;
}

}  // namespace

Strategy named_strategy(const std::string& name) {
  auto s = find_named(name);
  if (!s) throw Error("strategy", unknown_name(name));
  return *s;
}

std::vector<std::string> a2a_algorithm_names() {
  std::vector<std::string> out;
  for (const auto& [name, a] : kAlgorithms) out.push_back(name);
  return out;
}

std::vector<std::string> routed_a2a_algorithm_names() {
  std::vector<std::string> out;
  for (const A2AAlgorithmInfo& a : a2a_algorithms())
    if (a.moves_blocks) out.emplace_back(a.name);
  return out;
}

Algorithm parse_a2a_algorithm(const std::string& name, const std::string& where) {
  return pick(kAlgorithms, name, where);
}

void validate(const Strategy& s, const std::string& where) {
  const bool known = std::any_of(kAlgorithms.begin(), kAlgorithms.end(),
                                 [&](const auto& entry) { return entry.second == s.a2a; });
  if (!known)
    throw Error(where + ": a2a", "must be one of " + join(a2a_algorithm_names()) + ", got " +
                                     std::string(to_string(s.a2a)));
  if (s.a2a_dtype) {
    const auto& wire = a2a_wire_dtypes();
    for (core::Dtype d : {s.a2a_dtype->dispatch, s.a2a_dtype->combine})
      if (std::find(wire.begin(), wire.end(), d) == wire.end())
        throw Error(where + ": a2a_dtype", "must be one of " + join(a2a_dtype_names()) +
                                               " per direction, got " + to_string(*s.a2a_dtype));
  }
  if (s.chunks_fwd < 1 || s.chunks_fwd > kMaxChunks || s.chunks_bwd < 1 ||
      s.chunks_bwd > kMaxChunks)
    throw Error(where + ": chunks", "must be in [1, " + std::to_string(kMaxChunks) + "]");
  if (s.grad_partitions < 1 || s.grad_partitions > kMaxGradPartitions)
    throw Error(where + ": grad_partitions",
                "must be in [1, " + std::to_string(kMaxGradPartitions) + "]");
  if (s.hybrid_domain < 1) throw Error(where + ": hybrid_domain", "must be at least 1");
  long long levels = 1;
  for (int size : s.hybrid_levels) levels *= size;
  if (!s.hybrid_levels.empty() && levels != s.hybrid_domain)
    throw Error(where + ": hybrid_levels",
                "the sizes' product " + std::to_string(levels) +
                    " differs from hybrid_domain=" + std::to_string(s.hybrid_domain));
  if (!(s.compression > 0 && s.compression <= 1))
    throw Error(where + ": compression", "must be in (0, 1]");
  if (s.virtual_stages < 1 || s.virtual_stages > kMaxVirtualStages)
    throw Error(where + ": pp_schedule",
                "virtual stages must be in [1, " + std::to_string(kMaxVirtualStages) + "]");
  if ((s.pp_schedule == PpSchedule::kInterleaved) != (s.virtual_stages > 1))
    throw Error(where + ": pp_schedule",
                "interleaved:V takes V >= 2 virtual stages, the other schedules 1");
  if (s.zero < 0 || s.zero > 3) throw Error(where + ": zero", "must be 0, 1, 2 or 3");
  if (s.copy_pipelining && s.tp_dispatch != TpDispatch::kDropAllGather)
    throw Error(where + ": copy_pipelining",
                "needs tp_dispatch=drop-allgather (MoNTA O3 pipelines the AllGather's copy)");
  if (s.copy_pipelining && s.pipeline_experts)
    throw Error(where + ": copy_pipelining",
                "needs pipeline_experts=false (the copy restores the unchunked layout the "
                "experts read, MoNTA Fig. 8)");
}

namespace {

// An item without '=' in a knob list: a strategy name written where base=NAME belongs
// ("lina,chunks=2") gets the text rewritten with it first; anything else the knobs.
[[noreturn]] void throw_not_a_knob(const std::vector<std::string>& items, size_t i,
                                   const std::string& where) {
  const std::string& item = items[i];
  const auto bare = [](const std::string& it) { return it.find('=') == std::string::npos; };
  const auto has_base = [](const std::string& it) { return it.rfind("base=", 0) == 0; };
  const bool one_name = std::count_if(items.begin(), items.end(), bare) == 1 &&
                        std::none_of(items.begin(), items.end(), has_base);
  if (find_named(item) && one_name) {
    std::string rewritten = "base=" + item;
    for (size_t j = 0; j < items.size(); ++j)
      if (j != i) rewritten += "," + items[j];
    throw Error(where, "\"" + item + "\" is a strategy name, not knob=value; did you mean '" +
                           rewritten + "'? (base=NAME comes first)");
  }
  throw Error(where, "expected knob=value, got \"" + item + "\"" +
                         core::did_you_mean(item, knob_names()) + " (knobs: " + knob_list() + ")");
}

}  // namespace

ParsedStrategy parse_strategy_knobs(const std::string& text, const std::string& where) {
  if (text.find('=') == std::string::npos && text.find(',') == std::string::npos) {
    auto s = find_named(text);
    if (!s) throw Error(where, unknown_name(text));
    return {*s, text, {}};
  }
  const std::vector<std::string> items = core::split_items(text, where);
  ParsedStrategy out;
  Strategy& s = out.strategy;
  s.name = "custom";
  std::set<std::string> given;  // the knobs as written, to refuse one given twice
  for (size_t i = 0; i < items.size(); ++i) {
    const auto eq = items[i].find('=');
    if (eq == std::string::npos) throw_not_a_knob(items, i, where);
    const std::string knob = items[i].substr(0, eq), value = items[i].substr(eq + 1);
    const std::string at = where + ": " + knob;
    // A repeated knob would keep only its last value, silently.
    if (!given.insert(knob).second) throw Error(at, "given twice");
    if (knob == "base") {
      if (i != 0) throw Error(at, "must come first");
      auto base = find_named(value);
      if (!base) throw Error(at, unknown_name(value));
      s = *base;
      s.name = value + "-custom";
      out.method = value;
      continue;
    }
    const auto it = setters().find(knob);
    if (it == setters().end())
      throw Error(at, "unknown knob" + core::did_you_mean(knob, knob_names()) +
                          " (accepted: " + knob_list() + ")");
    // chunks sets both phases: with chunks_fwd or chunks_bwd beside it, one value would win by
    // the order of the items.
    const std::vector<std::string> sets = knob == "chunks"
                                              ? std::vector<std::string>{"chunks_fwd", "chunks_bwd"}
                                              : std::vector<std::string>{knob};
    for (const std::string& k : sets)
      if (out.is_explicit(k))
        throw Error(at, "sets " + k + ", which another item already set (chunks sets both " +
                            "chunks_fwd and chunks_bwd)");
    it->second(s, value, at);
    out.explicit_knobs.insert(sets.begin(), sets.end());
  }
  if (!out.is_explicit("name") && items.size() == 1 && !out.method.empty()) s.name = out.method;
  validate(s, where);
  return out;
}

Strategy parse_strategy(const std::string& text, const std::string& where) {
  return parse_strategy_knobs(text, where).strategy;
}

std::string_view to_string(Placement p) {
  return name_of(kPlacements, p);
}
std::string_view to_string(TpDispatch d) {
  return name_of(kDispatches, d);
}
std::string_view to_string(GradSync g) {
  return name_of(kSyncs, g);
}
std::string_view to_string(ExpertTransfer t) {
  return name_of(kTransfers, t);
}
std::string_view to_string(CommPriority p) {
  return name_of(kPriorities, p);
}

std::string pp_schedule_name(const Strategy& s) {
  if (s.pp_schedule == PpSchedule::kInterleaved)
    return "interleaved:" + std::to_string(s.virtual_stages);
  return std::string(name_of(kPpSchedules, s.pp_schedule));
}

std::vector<std::string> pp_schedule_names() {
  std::vector<std::string> out;
  for (const auto& [name, v] : kPpSchedules) out.push_back(name);
  return out;
}

void parse_pp_schedule(Strategy& s, const std::string& value, const std::string& where) {
  const std::string prefix = "interleaved:";
  if (value.rfind(prefix, 0) == 0) {
    s.pp_schedule = PpSchedule::kInterleaved;
    s.virtual_stages = parse_int(value.substr(prefix.size()), 2, kMaxVirtualStages,
                                 where + " (interleaved:V, V virtual stages per stage)");
    return;
  }
  if (value == "interleaved")
    throw Error(where,
                "interleaved needs its virtual stages per stage: interleaved:V, e.g. "
                "interleaved:2");
  const PpSchedule kind = pick(kPpSchedules, value, where);
  if (kind == PpSchedule::kInterleaved)
    throw Error(where, "write V: interleaved:2, interleaved:4, ...");
  s.pp_schedule = kind;
  s.virtual_stages = 1;
}

double effective_compression(const Strategy& s) {
  const bool travels = s.expert_transfer == ExpertTransfer::kHybrid && s.hybrid_domain > 1;
  return travels ? s.compression : 1.0;
}

std::string to_string(const Strategy& s) {
  std::ostringstream os;
  os.precision(17);
  os << "name=" << s.name << ",placement=" << to_string(s.placement) << ",a2a=" << to_string(s.a2a)
     << ",tp_dispatch=" << to_string(s.tp_dispatch) << ",chunks_fwd=" << s.chunks_fwd
     << ",chunks_bwd=" << s.chunks_bwd << ",pipeline_experts=" << std::boolalpha
     << s.pipeline_experts << ",copy_pipelining=" << s.copy_pipelining
     << ",grad_sync=" << to_string(s.grad_sync) << ",grad_partitions=" << s.grad_partitions
     << ",expert_transfer=" << to_string(s.expert_transfer) << ",hybrid_domain=" << s.hybrid_domain
     << ",compression=" << s.compression << ",shared_expert=" << s.shared_expert
     << ",sr_feedback=" << s.sr_feedback << ",comm_priority=" << to_string(s.comm_priority)
     << ",recompute_experts=" << s.recompute_experts << ",pp_schedule=" << pp_schedule_name(s)
     << ",overlap_microbatches=" << s.overlap_microbatches << ",zero=" << s.zero;
  for (size_t l = 0; l < s.hybrid_levels.size(); ++l)
    os << (l == 0 ? ",hybrid_levels=" : "x") << s.hybrid_levels[l];
  if (s.a2a_dtype) os << ",a2a_dtype=" << to_string(*s.a2a_dtype);
  return os.str();
}

}  // namespace moecomm::sched
