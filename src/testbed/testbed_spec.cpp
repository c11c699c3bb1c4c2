#include "testbed/testbed_spec.h"

#include <cstdlib>
#include <fstream>

#include "core/error.h"
#include "core/json_reader.h"

namespace moecomm::testbed {

namespace {

bool name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '-';
}

bool all_digits(const std::string& s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
  }
  return true;
}

std::string namespace_prefix(const std::string& name) {
  return "mctb-" + name + "-";
}

nlohmann::json link_json(const LinkSpec& link) {
  return {{"text", link.text}, {"rate_Bps", link.rate_Bps}, {"latency_s", link.latency_s}};
}

LinkSpec link_from_json(core::JsonReader r) {
  LinkSpec link;
  link.text = r.string("text");
  link.rate_Bps = r.positive("rate_Bps");
  link.latency_s = r.number("latency_s");
  return link;
}

}  // namespace

void validate_name(const std::string& name) {
  bool ok = !name.empty() && name.size() <= 32 && name[0] != '-' && name[0] != '_';
  for (char c : name) ok = ok && name_char(c);
  if (!ok) {
    throw Error("--name: '" + name + "'",
                "must be 1 to 32 letters, digits, '_' or '-', starting with a letter or digit");
  }
}

void TestbedSpec::validate() const {
  validate_name(name);
  if (nodes < 1 || nodes > kMaxNodes) {
    throw Error("--nodes", "must be between 1 and " + std::to_string(kMaxNodes) + ", got " +
                               std::to_string(nodes));
  }
  if (ranks_per_node < 1 || ranks_per_node > kMaxRanksPerNode) {
    throw Error("--ranks-per-node", "must be between 1 and " + std::to_string(kMaxRanksPerNode) +
                                        ", got " + std::to_string(ranks_per_node));
  }
  if (datacenters < 1 || datacenters > nodes || nodes % datacenters != 0) {
    throw Error("--datacenters", "must be at least 1 and divide --nodes (" + std::to_string(nodes) +
                                     "), got " + std::to_string(datacenters));
  }
  if (node_link.rate_Bps <= 0) throw Error("--node-link", "is required (a rate, e.g. 200mbit)");
  if (datacenters > 1 && !dc_link) {
    throw Error("--dc-link", "is required with --datacenters > 1 (a rate, e.g. 1gbit)");
  }
  if (datacenters == 1 && dc_link) {
    throw Error("--dc-link", "needs --datacenters > 1 (with one datacenter there is no dc link)");
  }
}

bool TestbedSpec::has_latency() const {
  return node_link.latency_s > 0 || (dc_link && dc_link->latency_s > 0);
}

std::string TestbedSpec::fabric_namespace() const {
  return namespace_prefix(name) + "fab";
}

std::string TestbedSpec::node_namespace(int node) const {
  return namespace_prefix(name) + "n" + std::to_string(node);
}

std::string TestbedSpec::node_hostname(int node) const {
  return "node" + std::to_string(node);
}

std::string TestbedSpec::node_address(int node) const {
  const int host = node + 1;  // host number 0 is the subnet's own address
  return "10.213." + std::to_string(host / 256) + "." + std::to_string(host % 256);
}

std::vector<std::string> TestbedSpec::namespaces() const {
  std::vector<std::string> all;
  for (int k = 0; k < nodes; ++k) all.push_back(node_namespace(k));
  all.push_back(fabric_namespace());
  return all;
}

bool is_testbed_namespace(const std::string& ns, const std::string& name) {
  const std::string prefix = namespace_prefix(name);
  if (ns.compare(0, prefix.size(), prefix) != 0) return false;
  const std::string rest = ns.substr(prefix.size());
  return rest == "fab" || (rest.size() > 1 && rest[0] == 'n' && all_digits(rest.substr(1)));
}

nlohmann::json to_json(const TestbedSpec& spec) {
  nlohmann::json j = {{"name", spec.name},
                      {"nodes", spec.nodes},
                      {"ranks_per_node", spec.ranks_per_node},
                      {"datacenters", spec.datacenters},
                      {"node_link", link_json(spec.node_link)},
                      {"dc_link", spec.dc_link ? link_json(*spec.dc_link) : nullptr},
                      {"subnet", kSubnet},
                      {"fabric_namespace", spec.fabric_namespace()}};
  // Derived, written for people and scripts reading the state; read back from the fields above.
  nlohmann::json nodes = nlohmann::json::array();
  for (int k = 0; k < spec.nodes; ++k) {
    nodes.push_back({{"node", k},
                     {"datacenter", spec.datacenter_of(k)},
                     {"namespace", spec.node_namespace(k)},
                     {"hostname", spec.node_hostname(k)},
                     {"address", spec.node_address(k)}});
  }
  j["node_list"] = nodes;
  return j;
}

TestbedSpec spec_from_json(const nlohmann::json& j, const std::string& where) {
  core::JsonReader r(j, where);
  TestbedSpec spec;
  spec.name = r.string("name");
  spec.nodes = static_cast<int>(r.positive_int("nodes", kMaxNodes));
  spec.ranks_per_node = static_cast<int>(r.positive_int("ranks_per_node", kMaxRanksPerNode));
  spec.datacenters = static_cast<int>(r.positive_int("datacenters", kMaxNodes));
  spec.node_link = link_from_json(r.object("node_link"));
  if (r.has("dc_link") && !r.value("dc_link").is_null()) {
    spec.dc_link = link_from_json(r.object("dc_link"));
  }
  try {
    spec.validate();
  } catch (const Error& e) {
    throw Error(where, std::string("inconsistent testbed state: ") + e.what());
  }
  return spec;
}

std::string state_parent_dir() {
  const char* dir = std::getenv("MOECOMM_TESTBED_DIR");
  return dir && *dir ? dir : "/run/moecomm-testbed";
}

std::string state_dir(const std::string& name) {
  return state_parent_dir() + "/" + name;
}

void write_state(const std::string& dir, const TestbedSpec& spec) {
  const std::string path = dir + "/state.json";
  std::ofstream f(path);
  f << to_json(spec).dump(2) << "\n";
  if (!f) throw Error(path, "cannot write the testbed state");
}

TestbedSpec read_state(const std::string& dir) {
  const std::string path = dir + "/state.json";
  return spec_from_json(core::read_json_file(path), path);
}

}  // namespace moecomm::testbed
