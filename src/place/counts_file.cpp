#include "place/counts_file.h"

#include <algorithm>
#include <string>

#include "core/error.h"
#include "core/json_reader.h"

namespace moecomm::place {

namespace {

constexpr int64_t kMaxEntries = int64_t{1} << 28;  // samples x experts
constexpr int kMaxDevices = 1 << 20;

int64_t integer_at(const nlohmann::json& v, const std::string& where, int64_t lo, int64_t hi) {
  if (!v.is_number_integer()) {
    throw Error(where, std::string("must be an integer, got ") + v.type_name());
  }
  const int64_t x = v.get<int64_t>();
  if (x < lo || x > hi) {
    throw Error(where, std::to_string(x) + " is outside [" + std::to_string(lo) + ", " +
                           std::to_string(hi) + "]");
  }
  return x;
}

RoutingCounts parse_num(const nlohmann::json& rows, const std::string& where) {
  if (rows.empty()) throw Error(where, "needs at least one sample");
  if (!rows[0].is_array() || rows[0].empty()) {
    throw Error(where + "[0]", "must be a non-empty array of token counts, one per expert");
  }
  const size_t experts = rows[0].size();
  if (static_cast<int64_t>(rows.size()) * static_cast<int64_t>(experts) > kMaxEntries) {
    throw Error(where, "too large: more than 2^28 counts");
  }
  RoutingCounts num(static_cast<int>(rows.size()), static_cast<int>(experts));
  for (size_t i = 0; i < rows.size(); ++i) {
    const std::string row_where = where + "[" + std::to_string(i) + "]";
    if (!rows[i].is_array() || rows[i].size() != experts) {
      throw Error(row_where, "must be an array of " + std::to_string(experts) +
                                 " counts like num[0] (ragged rows), got " +
                                 (rows[i].is_array() ? std::to_string(rows[i].size()) + " entries"
                                                     : std::string(rows[i].type_name())));
    }
    for (size_t e = 0; e < experts; ++e) {
      num.at(static_cast<int>(i), static_cast<int>(e)) =
          integer_at(rows[i][e], row_where + "[" + std::to_string(e) + "]", 0, int64_t{1} << 40);
    }
  }
  return num;
}

std::vector<int> parse_devices(const nlohmann::json& list, size_t expected, int devices,
                               const std::string& where, const std::string& per) {
  if (list.size() != expected) {
    throw Error(where, "has " + std::to_string(list.size()) + " entries, expected one per " + per +
                           " (" + std::to_string(expected) + ")");
  }
  std::vector<int> out(expected);
  for (size_t x = 0; x < expected; ++x) {
    out[x] = static_cast<int>(
        integer_at(list[x], where + "[" + std::to_string(x) + "]", 0, devices - 1));
  }
  return out;
}

}  // namespace

CountsInstance parse_counts(const nlohmann::json& doc, const std::string& where) {
  if (!doc.is_object()) throw Error(where, "must be a JSON object");
  core::JsonReader reader(doc, where);
  CountsInstance in;
  in.num = parse_num(reader.array("num"), reader.where("num"));
  in.grid.devices_per_node = static_cast<int>(reader.positive_int("devices_per_node", kMaxDevices));
  const nlohmann::json& experts = reader.array("expert_device");
  int highest = 0;
  for (size_t e = 0; e < experts.size(); ++e) {
    const std::string at = reader.where("expert_device") + "[" + std::to_string(e) + "]";
    highest = std::max(highest, static_cast<int>(integer_at(experts[e], at, 0, kMaxDevices - 1)));
  }
  const int g = in.grid.devices_per_node;
  int devices = (highest / g + 1) * g;
  if (reader.has("devices")) {
    devices = static_cast<int>(reader.positive_int("devices", kMaxDevices));
    if (devices % g != 0) {
      throw Error(
          reader.where("devices"),
          std::to_string(devices) + " is not a multiple of devices_per_node " + std::to_string(g));
    }
  }
  in.grid.nodes = devices / g;
  in.expert_device = parse_devices(experts, in.num.experts, devices, reader.where("expert_device"),
                                   "expert (columns of num)");
  if (in.num.samples < devices) {
    throw Error(reader.where("num"), std::to_string(in.num.samples) + " samples cannot fill " +
                                         std::to_string(devices) + " devices");
  }
  in.sample_device = reader.has("sample_device")
                         ? parse_devices(reader.array("sample_device"), in.num.samples, devices,
                                         reader.where("sample_device"), "sample (rows of num)")
                         : home_placement(in.num.samples, devices);
  reader.reject_unknown();
  return in;
}

CountsInstance read_counts_file(const std::string& path) {
  return parse_counts(core::read_json_file(path), path);
}

}  // namespace moecomm::place
