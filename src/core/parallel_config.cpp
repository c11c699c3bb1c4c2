#include "core/parallel_config.h"

#include <map>
#include <vector>

#include "core/error.h"
#include "core/item_list.h"
#include "core/json_reader.h"
#include "core/suggest.h"

namespace moecomm::core {

namespace {

std::optional<int>* field(ParallelSpec& s, const std::string& key) {
  static const std::map<std::string, std::optional<int> ParallelSpec::*> fields = {
      {"dp", &ParallelSpec::dp},   {"tp", &ParallelSpec::tp}, {"ep", &ParallelSpec::ep},
      {"esp", &ParallelSpec::esp}, {"pp", &ParallelSpec::pp}, {"cp", &ParallelSpec::cp}};
  auto it = fields.find(key);
  return it == fields.end() ? nullptr : &(s.*(it->second));
}

std::string at(const std::string& where, const std::string& key) {
  return where + ": " + key;
}

CpLayout parse_cp_layout(const std::string& value, const std::string& where) {
  if (value == "vertical") return CpLayout::kVertical;
  if (value == "horizontal") return CpLayout::kHorizontal;
  throw Error(where, "must be vertical or horizontal, got \"" + value + "\"" +
                         did_you_mean(value, {"vertical", "horizontal"}));
}

}  // namespace

std::string_view to_string(CpLayout layout) {
  return layout == CpLayout::kHorizontal ? "horizontal" : "vertical";
}

ParallelSpec parse_parallel_spec(const std::string& text, const std::string& where) {
  static const std::vector<std::string> kKeys = {"dp", "tp", "ep", "esp", "pp", "cp", "cp_layout"};
  ParallelSpec spec;
  for (const std::string& item : split_items(text, where)) {
    auto eq = item.find('=');
    if (eq == std::string::npos)
      throw Error(where, "expected key=value, got \"" + item +
                             "\" (keys: dp, tp, ep, esp, pp, cp, cp_layout)");
    std::string key = item.substr(0, eq), value = item.substr(eq + 1);
    if (key == "cp_layout") {
      if (spec.cp_layout) throw Error(at(where, key), "given twice");
      spec.cp_layout = parse_cp_layout(value, at(where, key));
      continue;
    }
    auto* f = field(spec, key);
    if (!f)
      throw Error(at(where, key), "unknown key" + did_you_mean(key, kKeys) +
                                      " (keys: dp, tp, ep, esp, pp, cp, cp_layout)");
    if (f->has_value()) throw Error(at(where, key), "given twice");
    size_t used = 0;
    int v = 0;
    try {
      v = std::stoi(value, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != value.size())
      throw Error(at(where, key), "must be an integer, got \"" + value + "\"");
    if (v < 1) throw Error(at(where, key), "must be at least 1, got " + value);
    if (v > kMaxParallelSize)
      throw Error(at(where, key), "too large (at most " + std::to_string(kMaxParallelSize) + ")");
    *f = v;
  }
  return spec;
}

ParallelSpec parse_parallel_json(const nlohmann::json& obj, const std::string& where) {
  JsonReader r(obj, where);
  ParallelSpec spec;
  for (const char* key : {"dp", "tp", "ep", "esp", "pp", "cp"})
    if (r.has(key)) *field(spec, key) = static_cast<int>(r.positive_int(key, kMaxParallelSize));
  if (r.has("cp_layout"))
    spec.cp_layout = parse_cp_layout(r.string("cp_layout"), r.where("cp_layout"));
  r.reject_unknown();
  return spec;
}

namespace {

// Products of up to four sizes of at most kMaxParallelSize fit in 64 bits.
void require_divides(int64_t part, int64_t whole, const std::string& where,
                     const std::string& what) {
  if (whole % part != 0)
    throw Error(where,
                what + " = " + std::to_string(part) + " does not divide " + std::to_string(whole));
}

int default_ep(int room, int experts) {
  int ep = 1;
  for (int d = 1; d <= room; ++d)
    if (room % d == 0 && experts % d == 0) ep = d;
  return ep;
}

}  // namespace

void check_cp_layout(const ParallelConfig& c, const std::string& where) {
  if (c.cp_layout != CpLayout::kHorizontal) return;
  const int64_t span = int64_t{c.esp} * c.ep;
  if (span % c.tp != 0 || c.dp % (span / c.tp) != 0)
    throw Error(where, "horizontal puts CP after the whole EP group, so tp (" +
                           std::to_string(c.tp) + ") must divide esp x ep (" +
                           std::to_string(span) + ") and the quotient must divide dp (" +
                           std::to_string(c.dp) + ")");
}

ParallelConfig resolve_parallel(const ParallelSpec& s, int world, int experts,
                                const std::string& where) {
  ParallelConfig c;
  c.tp = s.tp.value_or(1);
  c.cp = s.cp.value_or(1);
  c.pp = s.pp.value_or(1);
  c.esp = s.esp.value_or(c.tp);  // as Megatron-Core: expert TP defaults to the dense TP
  const std::string w = where + " (world " + std::to_string(world) + ")";
  const int64_t tcp = int64_t{c.tp} * c.cp * c.pp;
  require_divides(tcp, world, w, "tp x cp x pp");
  c.dp = s.dp.value_or(static_cast<int>(world / tcp));
  if (tcp * c.dp != world)
    throw Error(w,
                "tp x cp x dp x pp = " + std::to_string(tcp * c.dp) + " must equal the world size");
  require_divides(int64_t{c.esp} * c.pp, world, w, "esp x pp");
  c.ep = s.ep.value_or(default_ep(world / (c.esp * c.pp), experts));
  const int64_t moe = int64_t{c.esp} * c.ep * c.pp;
  require_divides(moe, world, w, "esp x ep x pp");
  if (experts % c.ep != 0)
    throw Error(where + ": ep", "ep = " + std::to_string(c.ep) +
                                    " does not divide the number of experts (" +
                                    std::to_string(experts) + ")");
  c.edp = static_cast<int>(world / moe);
  c.cp_layout = s.cp_layout.value_or(CpLayout::kVertical);
  check_cp_layout(c, where + ": cp_layout");
  return c;
}

nlohmann::json ParallelConfig::to_json() const {
  nlohmann::json j = {{"dp", dp}, {"tp", tp}, {"ep", ep},  {"esp", esp},
                      {"pp", pp}, {"cp", cp}, {"edp", edp}};
  if (cp_layout != CpLayout::kVertical) j["cp_layout"] = std::string(to_string(cp_layout));
  return j;
}

}  // namespace moecomm::core
