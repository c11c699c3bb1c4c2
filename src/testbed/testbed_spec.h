#pragma once
// The layout of one emulated cluster (`moecomm testbed up`): N nodes of R ranks in D
// datacenters, the node links and the datacenter links, and every name and address derived
// from it. Every name carries the testbed's name, so a testbed never touches anything it did
// not make:
//   node k:      network namespace mctb-<name>-n<k>, host name node<k>, address
//                10.213.0.0/16 host number k + 1 (node 0 = 10.213.0.1), interface eth0
//   fabric:      network namespace mctb-<name>-fab with one bridge per datacenter (br<d>)
//                and, when D > 1, a core bridge (brcore); node k's link ends there as n<k>,
//                datacenter d's uplink as u<d> (on br<d>) and c<d> (on brcore)
// Nodes fill datacenters in order: datacenter d holds nodes d*N/D .. (d+1)*N/D - 1.
// The state of a testbed that is up (state.json) is this spec as JSON.
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "testbed/link_spec.h"

namespace moecomm::testbed {

inline constexpr const char* kSubnet = "10.213.0.0/16";
inline constexpr const char* kDefaultName = "default";
inline constexpr int kMaxNodes = 1000;  // each node is a namespace and two shaped links
inline constexpr int kMaxRanksPerNode = 1024;

struct TestbedSpec {
  std::string name = kDefaultName;
  int nodes = 0;
  int ranks_per_node = 0;
  int datacenters = 1;
  LinkSpec node_link = {};
  std::optional<LinkSpec> dc_link = {};  // present iff datacenters > 1

  // Throws Error naming the flag (--nodes, --datacenters, --dc-link, ...).
  void validate() const;

  int nodes_per_datacenter() const { return nodes / datacenters; }
  int datacenter_of(int node) const { return node / nodes_per_datacenter(); }
  bool has_latency() const;

  std::string fabric_namespace() const;
  std::string node_namespace(int node) const;
  std::string node_hostname(int node) const;
  std::string node_address(int node) const;  // "10.213.0.1"
  // Nodes in order, then the fabric (the order `down` deletes them in).
  std::vector<std::string> namespaces() const;
};

// Testbed names become parts of namespace names: letters, digits, '_' and '-', 1 to 32
// characters, starting with a letter or digit. Throws Error naming --name.
void validate_name(const std::string& name);

// Whether `ns` is one of the namespaces testbed `name` makes (mctb-<name>-fab or
// mctb-<name>-n<digits>), whatever its size; finds the leftovers of a half-made testbed.
bool is_testbed_namespace(const std::string& ns, const std::string& name);

nlohmann::json to_json(const TestbedSpec& spec);
// `where` names the file in errors.
TestbedSpec spec_from_json(const nlohmann::json& j, const std::string& where);

// The state directory of testbed `name`: $MOECOMM_TESTBED_DIR/<name>, by default
// /run/moecomm-testbed/<name> (/run is a tmpfs, so a reboot, which also drops the
// namespaces, drops the state with them).
std::string state_parent_dir();
std::string state_dir(const std::string& name);

void write_state(const std::string& dir, const TestbedSpec& spec);
TestbedSpec read_state(const std::string& dir);

}  // namespace moecomm::testbed
