#include "place/routing_trace.h"

#include <fstream>
#include <initializer_list>
#include <utility>

#include "core/cluster.h"
#include "core/error.h"
#include "core/json_reader.h"

namespace moecomm::place {

using nlohmann::json;

int RoutingTrace::layers() const {
  return iterations.empty() ? 0 : static_cast<int>(iterations[0].size());
}

int RoutingTrace::samples() const {
  return layers() == 0 ? 0 : iterations[0][0].samples();
}

int RoutingTrace::tokens() const {
  return layers() == 0 ? 0 : iterations[0][0].tokens();
}

namespace {

constexpr const char* kFormat = "moecomm-routing-trace";
constexpr int64_t kVersion = 2;  // 2 added "model" and "layout"; version 1 still reads

// "trace.json: iterations" + [0][1][3]; built only when an error is thrown.
std::string path(const std::string& base, std::initializer_list<size_t> index) {
  std::string p = base;
  for (size_t i : index) p += "[" + std::to_string(i) + "]";
  return p;
}

std::string shown(const json& v) {
  if (v.is_structured()) return std::string("an ") + v.type_name();
  std::string text = v.dump();
  return text.size() > 60 ? text.substr(0, 57) + "..." : text;
}

// The list at base[index...], of exactly `want` entries (any size if want == 0, but not
// empty); `what` names the entries, `as` the entry whose size sets the expectation.
const json& list(const json& v, const std::string& base, std::initializer_list<size_t> index,
                 size_t want, const char* what, const char* as) {
  if (!v.is_array()) throw Error(path(base, index), "must be a list, got " + shown(v));
  if (want == 0 && v.empty())
    throw Error(path(base, index), std::string("must list at least one ") + what);
  if (want != 0 && v.size() != want)
    throw Error(path(base, index), "expected " + std::to_string(want) + " " + what + "s (as " + as +
                                       "), got " + std::to_string(v.size()));
  return v;
}

struct Shape {
  size_t layers = 0, samples = 0, tokens = 0;
};

// The shape of iterations[0][0], which every other layer must match.
Shape first_shape(const json& iterations, const std::string& base, int top_k) {
  Shape s;
  const json& it0 = list(iterations[0], base, {0}, 0, "layer", "");
  const json& layer0 = list(it0[0], base, {0, 0}, 0, "sample", "");
  const json& sample0 = list(layer0[0], base, {0, 0, 0}, 0, "token", "");
  s.layers = it0.size();
  s.samples = layer0.size();
  s.tokens = sample0.size();
  double ids = static_cast<double>(iterations.size()) * s.layers * s.samples * s.tokens * top_k;
  if (ids > static_cast<double>(kMaxTraceIds))
    throw Error(base, "too large: " + std::to_string(iterations.size()) + " iterations x " +
                          std::to_string(s.layers) + " layers x " + std::to_string(s.samples) +
                          " samples x " + std::to_string(s.tokens) + " tokens x top_k " +
                          std::to_string(top_k) + " is more than " + std::to_string(kMaxTraceIds) +
                          " expert ids");
  return s;
}

// Reads layers against the shape of iterations[0][0]; errors name base[i][l][s][t][k].
class LayerParser {
 public:
  LayerParser(const Shape& shape, int experts, int top_k, std::string base)
      : shape_(shape),
        experts_(experts),
        top_k_(top_k),
        base_(std::move(base)),
        seen_(experts, -1) {}

  LayerRouting parse(const json& layer, size_t i, size_t l) {
    list(layer, base_, {i, l}, shape_.samples, "sample", "iterations[0][0]");
    LayerRouting out(static_cast<int>(shape_.samples), static_cast<int>(shape_.tokens), top_k_);
    for (size_t s = 0; s < shape_.samples; ++s) {
      const json& sample =
          list(layer[s], base_, {i, l, s}, shape_.tokens, "token", "iterations[0][0][0]");
      for (size_t t = 0; t < shape_.tokens; ++t) {
        int32_t* ids = &out.at(static_cast<int>(s), static_cast<int>(t), 0);
        read_token(sample[t], ids, {i, l, s, t});
      }
    }
    return out;
  }

 private:
  void read_token(const json& token, int32_t* ids, std::initializer_list<size_t> at) {
    auto want = [&] { return "top_k = " + std::to_string(top_k_) + " expert ids"; };
    if (!token.is_array())
      throw Error(path(base_, at), "must be a list of " + want() + ", got " + shown(token));
    if (token.size() != static_cast<size_t>(top_k_))
      throw Error(path(base_, at), "expected " + want() + ", got " + std::to_string(token.size()));
    ++stamp_;
    for (int k = 0; k < top_k_; ++k) {
      const int32_t e = expert_id(token[k], at, k);
      if (seen_[e] == stamp_)
        throw Error(path(base_, at),
                    "expert id " + std::to_string(e) + " appears twice in one token's top-k");
      seen_[e] = stamp_;
      ids[k] = e;
    }
  }

  int32_t expert_id(const json& v, std::initializer_list<size_t> at, int k) const {
    auto where = [&] { return path(base_, at) + "[" + std::to_string(k) + "]"; };
    if (!v.is_number_integer())
      throw Error(where(), "expert id must be an integer, got " + shown(v));
    const bool negative = !v.is_number_unsigned() && v.get<int64_t>() < 0;
    if (negative || v.get<uint64_t>() >= static_cast<uint64_t>(experts_))
      throw Error(where(),
                  "expert id " + v.dump() + " is outside [0, " + std::to_string(experts_) + ")");
    return static_cast<int32_t>(v.get<int64_t>());
  }

  const Shape shape_;
  const int experts_, top_k_;
  const std::string base_;
  std::vector<int64_t> seen_;  // seen_[e] == stamp_: e is already in the current token,
  int64_t stamp_ = 0;          // so duplicates cost O(top_k) per token to find
};

int64_t check_header(core::JsonReader& r) {
  if (!r.has("format"))
    throw Error(r.where("format"),
                std::string("missing key (a routing trace has \"format\": \"") + kFormat + "\")");
  std::string format = r.string("format");
  if (format != kFormat)
    throw Error(r.where("format"),
                std::string("expected \"") + kFormat + "\", got \"" + format + "\"");
  int64_t version = r.integer("version");
  if (version < 1 || version > kVersion)
    throw Error(r.where("version"), "unsupported version " + std::to_string(version) +
                                        " (supported: 1 to " + std::to_string(kVersion) + ")");
  return version;
}

TraceModel parse_model(core::JsonReader m) {
  TraceModel model;
  model.name = m.string("name");
  model.hidden = m.positive_int("hidden", core::kMaxHidden);
  model.ffn_hidden = m.positive_int("ffn_hidden", core::kMaxHidden * 16);
  const std::string ffn = m.string("ffn_type");
  if (ffn == "swiglu") {
    model.ffn_type = core::FfnType::kSwiglu;
  } else if (ffn != "gelu") {
    throw Error(m.where("ffn_type"), "must be \"gelu\" or \"swiglu\", got \"" + ffn + "\"");
  }
  model.dtype_bytes = m.positive_int("dtype_bytes", 8);
  if (model.dtype_bytes != 1 && model.dtype_bytes != 2 && model.dtype_bytes != 4 &&
      model.dtype_bytes != 8)
    throw Error(m.where("dtype_bytes"), "must be 1, 2, 4 or 8");
  m.reject_unknown();
  return model;
}

TraceLayout parse_layout(core::JsonReader l) {
  TraceLayout layout;
  layout.ranks = static_cast<int>(l.positive_int("ranks", core::kMaxLevelCount));
  layout.ranks_per_node = static_cast<int>(l.positive_int("ranks_per_node", layout.ranks));
  layout.tp = static_cast<int>(l.positive_int("tp", layout.ranks));
  if (layout.ranks % layout.ranks_per_node != 0)
    throw Error(l.where("ranks_per_node"), std::to_string(layout.ranks_per_node) +
                                               " does not divide the " +
                                               std::to_string(layout.ranks) + " ranks");
  if (layout.ranks % layout.tp != 0)
    throw Error(l.where("tp"), std::to_string(layout.tp) + " does not divide the " +
                                   std::to_string(layout.ranks) + " ranks");
  l.reject_unknown();
  return layout;
}

json model_json(const TraceModel& m) {
  return {{"name", m.name},
          {"hidden", m.hidden},
          {"ffn_hidden", m.ffn_hidden},
          {"ffn_type", m.ffn_type == core::FfnType::kSwiglu ? "swiglu" : "gelu"},
          {"dtype_bytes", m.dtype_bytes}};
}

json layout_json(const TraceLayout& l) {
  return {{"ranks", l.ranks}, {"ranks_per_node", l.ranks_per_node}, {"tp", l.tp}};
}

}  // namespace

RoutingTrace parse_routing_trace(const json& doc, const std::string& where) {
  core::JsonReader r(doc, where);
  const int64_t version = check_header(r);
  RoutingTrace trace;
  trace.experts = static_cast<int>(r.positive_int("experts", kMaxExperts));
  trace.top_k = static_cast<int>(r.positive_int("top_k", trace.experts));
  if (version >= 2 && r.has("model")) trace.model = parse_model(r.object("model"));
  if (version >= 2 && r.has("layout")) trace.layout = parse_layout(r.object("layout"));
  const json& iterations = r.array("iterations");
  r.reject_unknown();
  const std::string base = r.where("iterations");
  if (iterations.empty()) throw Error(base, "must list at least one iteration");
  const Shape shape = first_shape(iterations, base, trace.top_k);
  LayerParser parser(shape, trace.experts, trace.top_k, base);
  for (size_t i = 0; i < iterations.size(); ++i) {
    const json& layers = list(iterations[i], base, {i}, shape.layers, "layer", "iterations[0]");
    std::vector<LayerRouting>& out = trace.iterations.emplace_back();
    for (size_t l = 0; l < shape.layers; ++l) out.push_back(parser.parse(layers[l], i, l));
  }
  return trace;
}

RoutingTrace read_routing_trace(const std::string& path) {
  return parse_routing_trace(core::read_json_file(path), path);
}

namespace {

json layer_to_json(const LayerRouting& layer) {
  json samples = json::array();
  for (int s = 0; s < layer.samples(); ++s) {
    json tokens = json::array();
    for (int t = 0; t < layer.tokens(); ++t) {
      json ids = json::array();
      for (int k = 0; k < layer.top_k(); ++k) ids.push_back(layer.at(s, t, k));
      tokens.push_back(std::move(ids));
    }
    samples.push_back(std::move(tokens));
  }
  return samples;
}

void check_shapes(const RoutingTrace& trace) {
  for (size_t i = 0; i < trace.iterations.size(); ++i) {
    if (static_cast<int>(trace.iterations[i].size()) != trace.layers())
      throw Error("routing trace: iteration " + std::to_string(i), "layer count differs");
    for (const LayerRouting& layer : trace.iterations[i])
      if (layer.samples() != trace.samples() || layer.tokens() != trace.tokens() ||
          layer.top_k() != trace.top_k)
        throw Error("routing trace: iteration " + std::to_string(i), "layer shapes differ");
  }
}

}  // namespace

json routing_trace_to_json(const RoutingTrace& trace) {
  check_shapes(trace);
  json iterations = json::array();
  for (const std::vector<LayerRouting>& layers : trace.iterations) {
    json out = json::array();
    for (const LayerRouting& layer : layers) out.push_back(layer_to_json(layer));
    iterations.push_back(std::move(out));
  }
  json doc = {{"format", kFormat},
              {"version", kVersion},
              {"experts", trace.experts},
              {"top_k", trace.top_k},
              {"iterations", std::move(iterations)}};
  if (trace.model) doc["model"] = model_json(*trace.model);
  if (trace.layout) doc["layout"] = layout_json(*trace.layout);
  return doc;
}

void write_routing_trace(const RoutingTrace& trace, const std::string& path) {
  const json doc = routing_trace_to_json(trace);
  std::ofstream out(path);
  if (!out) throw Error(path, "cannot open file for writing");
  // The header first, so `head` on a trace shows what it is (json objects sort their keys).
  out << "{\"format\": " << doc.at("format").dump() << ", \"version\": " << kVersion
      << ", \"experts\": " << trace.experts << ", \"top_k\": " << trace.top_k;
  for (const char* key : {"model", "layout"})
    if (doc.contains(key)) out << ",\n \"" << key << "\": " << doc.at(key).dump();
  out << ",\n \"iterations\": " << doc.at("iterations").dump() << "}\n";
  out.close();
  if (!out) throw Error(path, "cannot write file");
}

}  // namespace moecomm::place
