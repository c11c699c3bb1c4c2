#include "core/cluster.h"

#include <algorithm>
#include <limits>

#include "core/error.h"
#include "core/json_reader.h"
#include "core/units.h"

namespace moecomm::core {

using nlohmann::json;

int Cluster::world_size() const {
  int world = 1;
  for (const Level& level : levels) world *= level.count;
  return world;
}

int Cluster::level_index(const std::string& level_name) const {
  for (size_t i = 0; i < levels.size(); ++i)
    if (levels[i].name == level_name) return static_cast<int>(i);
  return -1;
}

CurvePoints Cluster::curve(const std::string& level, const std::string& collective) const {
  auto l = efficiency.find(level);
  if (l == efficiency.end()) return {};
  auto c = l->second.find(collective);
  return c == l->second.end() ? CurvePoints{} : c->second;
}

const std::vector<std::string>& known_collectives() {
  static const std::vector<std::string> names = {"alltoall", "allgather", "reducescatter",
                                                 "allreduce", "memcpy"};
  return names;
}

namespace {

Level parse_level(const json& item, const std::string& where) {
  JsonReader r(item, where);
  Level level;
  level.name = r.string("name");
  if (level.name.empty()) throw Error(r.where("name"), "must not be empty");
  level.count = static_cast<int>(r.positive_int("count", kMaxLevelCount));
  level.bandwidth = units::gbps_to_bytes_per_s(r.in_range("bandwidth_GBps", kBandwidthGBps));
  level.latency = r.in_range("latency_us", kLatencyUs) * units::kUs;
  if (r.has("overhead_us")) level.overhead = r.in_range("overhead_us", kOverheadUs) * units::kUs;
  r.reject_unknown();
  return level;
}

CurvePoints parse_curve(const json& points, const std::string& where) {
  if (!points.is_array() || points.empty())
    throw Error(where, "must be a non-empty list of [bytes, efficiency] pairs");
  CurvePoints curve;
  for (size_t i = 0; i < points.size(); ++i) {
    const json& p = points[i];
    std::string at = where + "[" + std::to_string(i) + "]";
    if (!p.is_array() || p.size() != 2 || !p[0].is_number() || !p[1].is_number())
      throw Error(at, "must be a pair [bytes, efficiency]");
    const double bytes = p[0].get<double>(), eff = p[1].get<double>();
    if (!(bytes >= kMessageBytes.min && bytes <= kMessageBytes.max))
      throw Error(at, "message size must be in [1, 1e15] bytes (" +
                          std::string(kMessageBytes.meaning) + "), got " + p[0].dump());
    if (!(eff >= kShare.min && eff <= kShare.max))
      throw Error(at, "efficiency must be in [0.001, 1] (" + std::string(kShare.meaning) +
                          "), got " + p[1].dump());
    curve.emplace_back(bytes, eff);
  }
  std::sort(curve.begin(), curve.end());
  for (size_t i = 1; i < curve.size(); ++i)
    if (curve[i].first == curve[i - 1].first) throw Error(where, "duplicate message size");
  return curve;
}

void parse_efficiency(JsonReader& r, Cluster& cluster) {
  JsonReader eff = r.object("efficiency");
  for (const auto& [level_name, per_level] : r.value("efficiency").items()) {
    std::string at = eff.where(level_name);
    if (cluster.level_index(level_name) < 0)
      throw Error(at, "unknown level (the cluster's levels are its \"levels\" names)");
    JsonReader lr = eff.object(level_name);
    for (const auto& [collective, points] : per_level.items()) {
      const auto& known = known_collectives();
      if (std::find(known.begin(), known.end(), collective) == known.end())
        throw Error(lr.where(collective),
                    "unknown collective (alltoall, allgather, reducescatter, allreduce, memcpy)");
      cluster.efficiency[level_name][collective] =
          parse_curve(lr.array(collective), lr.where(collective));
    }
  }
}

// {"fp32": 19.5, "bf16": 312, ...}: TFLOPS per compute dtype.
std::map<Dtype, double> parse_flops_by_dtype(JsonReader& dev) {
  std::map<Dtype, double> out;
  JsonReader table = dev.object("tflops_by_dtype");
  for (const auto& [key, _] : dev.value("tflops_by_dtype").items())
    out[parse_dtype(key, table.where(key))] = table.in_range(key, kTflops) * units::kTflops;
  return out;
}

}  // namespace

std::string_view to_string(Fairness fairness) {
  return fairness == Fairness::kPerFlow ? "per-flow" : "per-collective";
}

Fairness parse_fairness(const std::string& name, const std::string& where) {
  if (name == "per-collective") return Fairness::kPerCollective;
  if (name == "per-flow") return Fairness::kPerFlow;
  throw Error(where, "must be \"per-collective\" or \"per-flow\", got \"" + name + "\"");
}

double Device::peak_flops(Dtype dtype) const {
  const auto it = flops_by_dtype.find(dtype);
  return it == flops_by_dtype.end() ? flops : it->second;
}

Cluster parse_cluster(const json& doc, const std::string& where) {
  JsonReader r(doc, where);
  Cluster cluster;
  cluster.name = r.string("name");
  if (r.has("description")) cluster.description = r.string("description");
  const json& levels = r.array("levels");
  if (levels.empty()) throw Error(r.where("levels"), "must list at least one level");
  for (size_t i = 0; i < levels.size(); ++i) {
    cluster.levels.push_back(parse_level(levels[i], r.where("levels[" + std::to_string(i) + "]")));
    for (size_t j = 0; j < i; ++j)
      if (cluster.levels[j].name == cluster.levels[i].name)
        throw Error(r.where("levels[" + std::to_string(i) + "].name"),
                    "duplicate level name \"" + cluster.levels[i].name + "\"");
  }
  double world = 1;
  for (const Level& l : cluster.levels) world *= l.count;
  if (world > kMaxLevelCount)
    throw Error(r.where("levels"),
                "more than " + std::to_string(kMaxLevelCount) + " devices in all");
  JsonReader dev = r.object("device");
  cluster.device.flops = dev.in_range("tflops", kTflops) * units::kTflops;
  if (dev.has("backward_tflops"))
    cluster.device.backward_flops = dev.in_range("backward_tflops", kTflops) * units::kTflops;
  if (dev.has("overlapped_compute_share"))
    cluster.device.overlapped_compute_share = dev.in_range("overlapped_compute_share", kShare);
  if (dev.has("tflops_by_dtype")) cluster.device.flops_by_dtype = parse_flops_by_dtype(dev);
  if (dev.has("compute_efficiency"))
    cluster.device.compute_efficiency = dev.in_range("compute_efficiency", kShare);
  cluster.device.memory_bytes = dev.in_range("memory_GB", kMemoryGB) * units::kGB;
  cluster.device.memory_bandwidth =
      units::gbps_to_bytes_per_s(dev.in_range("memory_bandwidth_GBps", kBandwidthGBps));
  dev.reject_unknown();
  if (r.has("network_priorities")) cluster.network_priorities = r.boolean("network_priorities");
  if (r.has("fairness"))
    cluster.fairness = parse_fairness(r.string("fairness"), r.where("fairness"));
  if (r.has("efficiency")) parse_efficiency(r, cluster);
  r.reject_unknown();
  return cluster;
}

json cluster_to_json(const Cluster& c) {
  json levels = json::array();
  for (const Level& l : c.levels) {
    levels.push_back({{"name", l.name},
                      {"count", l.count},
                      {"bandwidth_GBps", l.bandwidth / units::kGB},
                      {"latency_us", l.latency / units::kUs}});
    if (l.overhead > 0) levels.back()["overhead_us"] = l.overhead / units::kUs;
  }
  json doc = {{"name", c.name},
              {"levels", levels},
              {"device",
               {{"tflops", c.device.flops / units::kTflops},
                {"memory_GB", c.device.memory_bytes / units::kGB},
                {"memory_bandwidth_GBps", c.device.memory_bandwidth / units::kGB}}}};
  if (c.device.backward_flops > 0)
    doc["device"]["backward_tflops"] = c.device.backward_flops / units::kTflops;
  if (c.device.overlapped_compute_share < 1)
    doc["device"]["overlapped_compute_share"] = c.device.overlapped_compute_share;
  for (const auto& [dtype, flops] : c.device.flops_by_dtype)
    doc["device"]["tflops_by_dtype"][std::string(to_string(dtype))] = flops / units::kTflops;
  if (c.device.compute_efficiency < 1)
    doc["device"]["compute_efficiency"] = c.device.compute_efficiency;
  if (!c.description.empty()) doc["description"] = c.description;
  if (!c.network_priorities) doc["network_priorities"] = false;
  if (c.fairness != Fairness::kPerCollective) doc["fairness"] = std::string(to_string(c.fairness));
  if (!c.efficiency.empty()) {
    json eff = json::object();
    for (const auto& [level, per] : c.efficiency)
      for (const auto& [coll, points] : per) {
        json pts = json::array();
        for (auto [b, e] : points) pts.push_back({b, e});
        eff[level][coll] = pts;
      }
    doc["efficiency"] = eff;
  }
  return doc;
}

}  // namespace moecomm::core
