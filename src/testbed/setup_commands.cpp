#include "testbed/setup_commands.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <string_view>

namespace moecomm::testbed {

namespace {

// The bucket holds at least 4 ms of traffic: the classic rule is burst >= rate / HZ, and
// on this kernel (hrtimer-driven tbf, veth handing over 64 KB GSO packets) a smaller bucket
// loses throughput at high rates (measured: 1gbit reaches 609 Mbit/s with a 16 KiB bucket
// and 959 Mbit/s with 4 ms = 500 KB). Never below 16 KiB, i.e. ten 1500-byte frames.
constexpr double kBurstSeconds = 0.004;
constexpr long long kMinBurstBytes = 16 * 1024;
// The queue behind the bucket holds 100 ms of traffic (at least 32 KiB, about 20 frames):
// deep enough that TCP keeps the link busy instead of collapsing on drops, shallow enough
// that the queueing delay stays well under a second.
constexpr double kQueueSeconds = 0.1;
constexpr long long kMinQueueBytes = 32 * 1024;
constexpr double kFrameBytes = 1500;
constexpr long long kMinNetemPackets = 1000;  // netem's own default limit

// An interface name: a short prefix and an index ("br0", "n3"). Appended in place: GCC 12
// reports a false -Wrestrict overlap for `"br" + std::to_string(i)` once inlined at -O3.
std::string numbered(std::string_view prefix, int index) {
  std::string name(prefix);
  name += std::to_string(index);
  return name;
}

Argv ip_in(const std::string& ns, std::initializer_list<std::string> rest) {
  Argv argv = {"ip", "-n", ns};
  argv.insert(argv.end(), rest);
  return argv;
}

Argv tc_in(const std::string& ns, std::initializer_list<std::string> rest) {
  Argv argv = {"tc", "-n", ns};
  argv.insert(argv.end(), rest);
  return argv;
}

// Adds and removes a qdisc on the fabric's loopback, to learn before building anything
// whether the kernel has it (a missing qdisc fails with "Specified qdisc kind is unknown").
void probe(std::vector<SetupStep>& steps, const std::string& fab, Argv qdisc, Check check) {
  Argv add = tc_in(fab, {"qdisc", "add", "dev", "lo", "root"});
  add.insert(add.end(), qdisc.begin(), qdisc.end());
  steps.push_back({add, check});
  steps.push_back({tc_in(fab, {"qdisc", "del", "dev", "lo", "root"})});
}

void add_fabric(std::vector<SetupStep>& steps, const TestbedSpec& spec) {
  const std::string fab = spec.fabric_namespace();
  steps.push_back({{"ip", "netns", "add", fab}, Check::kNamespace});
  steps.push_back({ip_in(fab, {"link", "set", "lo", "up"})});
  probe(steps, fab, {"tbf", "rate", "8000000bit", "burst", "16384", "limit", "49152"}, Check::kTbf);
  if (spec.has_latency()) probe(steps, fab, {"netem", "delay", "1000us"}, Check::kNetem);
  for (int d = 0; d < spec.datacenters; ++d) {
    const std::string br = numbered("br", d);
    steps.push_back({ip_in(fab, {"link", "add", br, "type", "bridge"})});
    steps.push_back({ip_in(fab, {"link", "set", br, "up"})});
  }
  if (spec.datacenters == 1) return;
  steps.push_back({ip_in(fab, {"link", "add", "brcore", "type", "bridge"})});
  steps.push_back({ip_in(fab, {"link", "set", "brcore", "up"})});
  for (int d = 0; d < spec.datacenters; ++d) {
    const std::string up = numbered("u", d), core = numbered("c", d);
    steps.push_back({ip_in(fab, {"link", "add", up, "type", "veth", "peer", "name", core})});
    steps.push_back({ip_in(fab, {"link", "set", up, "master", numbered("br", d), "up"})});
    steps.push_back({ip_in(fab, {"link", "set", core, "master", "brcore", "up"})});
    steps.push_back({shaping_command(fab, up, *spec.dc_link)});
    steps.push_back({shaping_command(fab, core, *spec.dc_link)});
  }
}

void add_node(std::vector<SetupStep>& steps, const TestbedSpec& spec, int k) {
  const std::string fab = spec.fabric_namespace(), ns = spec.node_namespace(k);
  const std::string port = numbered("n", k);
  const std::string br = numbered("br", spec.datacenter_of(k));
  steps.push_back({{"ip", "netns", "add", ns}, Check::kNamespace});
  steps.push_back({ip_in(ns, {"link", "set", "lo", "up"})});
  // Both ends are created where they live: no interface ever appears in the root namespace.
  steps.push_back(
      {ip_in(fab, {"link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", ns})});
  steps.push_back({ip_in(fab, {"link", "set", port, "master", br, "up"})});
  steps.push_back({ip_in(ns, {"addr", "add", spec.node_address(k) + "/16", "dev", "eth0"})});
  steps.push_back({ip_in(ns, {"link", "set", "eth0", "up"})});
  steps.push_back({shaping_command(ns, "eth0", spec.node_link)});
  steps.push_back({shaping_command(fab, port, spec.node_link)});
}

}  // namespace

TbfParams tbf_params(double rate_Bps) {
  const long long burst =
      std::max(kMinBurstBytes, static_cast<long long>(std::ceil(rate_Bps * kBurstSeconds)));
  const long long queue =
      std::max(kMinQueueBytes, static_cast<long long>(std::ceil(rate_Bps * kQueueSeconds)));
  return {burst, burst + queue};
}

long long netem_limit_packets(double rate_Bps, double delay_s) {
  const double packets = rate_Bps * (delay_s + kQueueSeconds) / kFrameBytes;
  return std::max(kMinNetemPackets, static_cast<long long>(std::ceil(packets)));
}

Argv shaping_command(const std::string& ns, const std::string& dev, const LinkSpec& link) {
  if (link.latency_s > 0) {
    const double delay = link.latency_s / 2;
    return tc_in(ns, {"qdisc", "add", "dev", dev, "root", "netem", "delay", tc_time(delay), "rate",
                      tc_rate(link.rate_Bps), "limit",
                      std::to_string(netem_limit_packets(link.rate_Bps, delay))});
  }
  const TbfParams p = tbf_params(link.rate_Bps);
  return tc_in(ns,
               {"qdisc", "add", "dev", dev, "root", "tbf", "rate", tc_rate(link.rate_Bps), "burst",
                std::to_string(p.burst_bytes), "limit", std::to_string(p.limit_bytes)});
}

std::vector<SetupStep> up_steps(const TestbedSpec& spec) {
  std::vector<SetupStep> steps;
  add_fabric(steps, spec);
  for (int k = 0; k < spec.nodes; ++k) add_node(steps, spec, k);
  return steps;
}

Argv list_namespaces_command() {
  return {"ip", "netns", "list"};
}

Argv namespace_pids_command(const std::string& ns) {
  return {"ip", "netns", "pids", ns};
}

std::vector<Argv> delete_namespace_commands(const std::vector<std::string>& namespaces) {
  std::vector<Argv> commands;
  for (const std::string& ns : namespaces) commands.push_back({"ip", "netns", "del", ns});
  return commands;
}

}  // namespace moecomm::testbed
