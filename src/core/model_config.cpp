#include "core/model_config.h"

#include <algorithm>
#include <cstdio>

#include "core/error.h"
#include "core/ffn_type_names.h"
#include "core/json_reader.h"
#include "core/suggest.h"

namespace moecomm::core {

using nlohmann::json;

std::string_view to_string(FfnType t) {
  return t == FfnType::kSwiglu ? "swiglu" : "gelu";
}

FfnType parse_ffn_type(std::string_view name, const std::string& where) {
  if (name == "gelu") return FfnType::kGelu;
  if (name == "swiglu") return FfnType::kSwiglu;
  throw Error(where, "must be \"gelu\" or \"swiglu\", got \"" + std::string(name) + "\"" +
                         did_you_mean(name, {"gelu", "swiglu"}));
}

std::optional<RouterGroupsProblem> router_groups_problem(int64_t experts, int64_t top_k,
                                                         int64_t groups, int64_t group_top_k) {
  const auto n = [](int64_t v) { return std::to_string(v); };
  if (groups < 1) return RouterGroupsProblem{"router_groups", "must be >= 1, got " + n(groups)};
  if (experts % groups != 0)
    return RouterGroupsProblem{"router_groups", "router_groups = " + n(groups) +
                                                    " does not divide experts = " + n(experts) +
                                                    " (the groups are equal)"};
  if (group_top_k < 0 || group_top_k > groups)
    return RouterGroupsProblem{"router_group_top_k", "must be in [0, router_groups = " + n(groups) +
                                                         "] (0: every " + "group), got " +
                                                         n(group_top_k)};
  if (group_top_k > 0 && group_top_k * (experts / groups) < top_k)
    return RouterGroupsProblem{
        "router_group_top_k",
        "router_group_top_k x (experts / router_groups) = " + n(group_top_k) + " x " +
            n(experts / groups) + " = " + n(group_top_k * (experts / groups)) +
            " is fewer than top_k = " + n(top_k) + " (a token's groups must hold its experts)"};
  return std::nullopt;
}

namespace {

FfnType ffn_type_of(JsonReader& r) {
  if (!r.has("ffn_type")) return FfnType::kGelu;
  return parse_ffn_type(r.string("ffn_type"), r.where("ffn_type"));
}

void check_model(const ModelConfig& m, JsonReader& r) {
  if (m.top_k > m.experts)
    throw Error(r.where("top_k"), "top_k = " + std::to_string(m.top_k) +
                                      " exceeds experts = " + std::to_string(m.experts));
  if (m.hidden % m.heads != 0)
    throw Error(r.where("heads"), "heads = " + std::to_string(m.heads) +
                                      " does not divide hidden = " + std::to_string(m.hidden));
  if (m.dtype_bytes != 1 && m.dtype_bytes != 2 && m.dtype_bytes != 4 && m.dtype_bytes != 8)
    throw Error(r.where("dtype_bytes"), "must be 1, 2, 4 or 8");
  if (m.dense_layers >= m.layers)
    throw Error(r.where("dense_layers"),
                "dense_layers = " + std::to_string(m.dense_layers) +
                    " leaves no MoE layer of layers = " + std::to_string(m.layers));
  if (m.kv_heads > 0 && m.heads % m.kv_heads != 0)
    throw Error(r.where("kv_heads"), "kv_heads = " + std::to_string(m.kv_heads) +
                                         " does not divide heads = " + std::to_string(m.heads));
  if (const auto problem =
          router_groups_problem(m.experts, m.top_k, m.router_groups, m.router_group_top_k))
    throw Error(r.where(problem->key), problem->message);
}

}  // namespace

ModelConfig parse_model(const json& doc, const std::string& where) {
  JsonReader r(doc, where);
  ModelConfig m;
  m.source = where;
  m.name = r.string("name");
  if (r.has("description")) m.description = r.string("description");
  // Bounds far beyond any real model keep every derived size finite and every search short.
  m.hidden = r.positive_int("hidden", kMaxHidden);
  m.ffn_hidden = r.positive_int("ffn_hidden", kMaxHidden * 16);
  m.experts = r.positive_int("experts", kMaxExperts);
  m.top_k = r.positive_int("top_k");
  m.layers = r.positive_int("layers", kMaxLayers);
  m.heads = r.positive_int("heads", kMaxHidden);
  m.seq_len = r.positive_int("seq_len", kMaxSeqLen);
  m.micro_batch = r.positive_int("micro_batch", kMaxMicroBatch);
  if (r.has("micro_batches")) m.micro_batches = r.positive_int("micro_batches", kMaxMicroBatch);
  const auto count = [&](const char* key, int64_t hi) -> int64_t {
    if (!r.has(key)) return 0;
    const int64_t v = r.integer(key);
    if (v < 0 || v > hi)
      throw Error(r.where(key),
                  "must be in [0, " + std::to_string(hi) + "], got " + std::to_string(v));
    return v;
  };
  m.dense_layers = count("dense_layers", kMaxLayers);
  m.dense_ffn_hidden = count("dense_ffn_hidden", kMaxHidden * 16);
  m.shared_experts = count("shared_experts", kMaxExperts);
  m.shared_expert_ffn_hidden = count("shared_expert_ffn_hidden", kMaxHidden * 16);
  m.kv_heads = count("kv_heads", kMaxHidden);
  if (r.has("router_groups"))
    m.router_groups = static_cast<int>(r.positive_int("router_groups", kMaxExperts));
  if (r.has("router_group_top_k"))
    m.router_group_top_k = static_cast<int>(count("router_group_top_k", kMaxExperts));
  if (!r.value("capacity_factor").is_null())
    m.capacity_factor = r.in_range("capacity_factor", kCapacityFactor);
  m.dtype_bytes = r.positive_int("dtype_bytes");
  if (r.has("compute_dtype"))
    m.compute_dtype = parse_dtype(r.string("compute_dtype"), r.where("compute_dtype"));
  m.ffn_type = ffn_type_of(r);
  if (r.has("vocab_size")) {
    m.vocab_size = r.integer("vocab_size");
    if (m.vocab_size < 0) throw Error(r.where("vocab_size"), "must not be negative");
    if (m.vocab_size > kMaxVocab)
      throw Error(r.where("vocab_size"), "too large (at most 1000000000)");
  }
  if (r.has("parallel")) m.parallel = parse_parallel_json(r.value("parallel"), r.where("parallel"));
  if (r.has("cluster")) m.cluster = r.string("cluster");
  check_model(m, r);
  r.reject_unknown();
  check_model_sizes(m, where);
  return m;
}

void check_model_sizes(const ModelConfig& m, const std::string& where) {
  const double cf = std::max(1.0, m.capacity_factor.value_or(1.0));
  const double bytes = double(m.seq_len) * double(m.micro_batch) * double(m.top_k) *
                       double(m.hidden) * double(m.dtype_bytes) * cf;
  if (bytes <= kMaxDispatchBytes) return;
  char text[96];
  std::snprintf(text, sizeof text, "%.3g bytes, more than %.0e (1 PB)", bytes, kMaxDispatchBytes);
  throw Error(where, std::string("one micro-batch's dispatch (seq_len x micro_batch x top_k x "
                                 "hidden x dtype_bytes") +
                         (cf > 1 ? " x capacity_factor" : "") + ") would be " + text +
                         ": reduce seq_len or micro_batch");
}

void check_parallel_fits_model(const ParallelConfig& p, const ModelConfig& m,
                               const std::string& where) {
  auto require = [&](const char* key, int size, int64_t whole, const char* what) {
    if (whole % size != 0)
      throw Error(where + ": " + key, std::string(key) + " = " + std::to_string(size) +
                                          " does not divide the model's " + what + " (" +
                                          std::to_string(whole) + ")");
  };
  // pp may split the layers unevenly (sched::split_layers), but every stage needs one.
  if (m.layers < p.pp)
    throw Error(where + ": pp", "pp = " + std::to_string(p.pp) + " exceeds the model's " +
                                    std::to_string(m.layers) + " layers (every stage needs one)");
  require("cp", p.cp, m.seq_len, "seq_len");
  require("tp", p.tp, m.heads, "heads");
  require("esp", p.esp, m.ffn_hidden, "ffn_hidden");
}

json model_to_json(const ModelConfig& m) {
  json doc = {{"name", m.name},
              {"hidden", m.hidden},
              {"ffn_hidden", m.ffn_hidden},
              {"experts", m.experts},
              {"top_k", m.top_k},
              {"layers", m.layers},
              {"heads", m.heads},
              {"seq_len", m.seq_len},
              {"micro_batch", m.micro_batch},
              {"micro_batches", m.micro_batches},
              {"capacity_factor", m.capacity_factor ? json(*m.capacity_factor) : json(nullptr)},
              {"dtype_bytes", m.dtype_bytes},
              {"ffn_type", std::string(to_string(m.ffn_type))},
              {"vocab_size", m.vocab_size}};
  if (m.dense_layers > 0) doc["dense_layers"] = m.dense_layers;
  if (m.dense_ffn_hidden > 0) doc["dense_ffn_hidden"] = m.dense_ffn_hidden;
  if (m.shared_experts > 0) doc["shared_experts"] = m.shared_experts;
  if (m.shared_expert_ffn_hidden > 0) doc["shared_expert_ffn_hidden"] = m.shared_expert_ffn_hidden;
  if (m.kv_heads > 0) doc["kv_heads"] = m.kv_heads;
  if (m.router_groups != 1) doc["router_groups"] = m.router_groups;
  if (m.router_group_top_k > 0) doc["router_group_top_k"] = m.router_group_top_k;
  if (m.compute_dtype) doc["compute_dtype"] = std::string(to_string(*m.compute_dtype));
  if (!m.description.empty()) doc["description"] = m.description;
  if (m.cluster) doc["cluster"] = *m.cluster;
  if (m.parallel) {
    json par = json::object();
    for (auto [key, v] : {std::pair{"dp", m.parallel->dp},
                          {"tp", m.parallel->tp},
                          {"ep", m.parallel->ep},
                          {"esp", m.parallel->esp},
                          {"pp", m.parallel->pp},
                          {"cp", m.parallel->cp}})
      if (v) par[key] = *v;
    doc["parallel"] = par;
  }
  return doc;
}

}  // namespace moecomm::core
