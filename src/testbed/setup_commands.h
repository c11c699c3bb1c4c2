#pragma once
// The exact command lines that build and take down a testbed (testbed_spec.h has the names).
// Pure: nothing here runs anything, so the lists are unit tested without root; testbed.cpp
// runs them.
//
// Shaping: each link is a veth pair shaped on BOTH ends (the egress of each end), so both
// directions of a link carry at most its rate. A packet between two nodes crosses the
// sender's node-side end and the receiver's fabric-side end; across datacenters it also
// crosses the sender datacenter's uplink (u<d>) and the receiver's downlink (c<d>).
// Without a latency the qdisc is tbf; with one it is netem (delay + rate), which this
// module only writes: whether the kernel has netem is probed first (SetupStep::Check).
#include <string>
#include <vector>

#include "testbed/link_spec.h"
#include "testbed/testbed_spec.h"

namespace moecomm::testbed {

using Argv = std::vector<std::string>;

// What a failing step means, for the error message.
enum class Check {
  kNone,       // a plain step: its command and stderr say enough
  kNamespace,  // creating a network namespace: are namespaces allowed here?
  kTbf,        // the tbf probe: is the tbf qdisc in this kernel?
  kNetem,      // the netem probe: is the netem qdisc in this kernel?
};

struct SetupStep {
  Argv argv;
  Check check = Check::kNone;
};

// tbf's bucket and queue for a rate, in bytes (see setup_commands.cpp for why).
struct TbfParams {
  long long burst_bytes;
  long long limit_bytes;
};
TbfParams tbf_params(double rate_Bps);

// netem's queue, in packets, for a rate and the delay of one end.
long long netem_limit_packets(double rate_Bps, double delay_s);

// The qdisc of one end of a link: tbf, or netem when the link has a latency (each end
// delays by half of it, so one crossing of the link, two ends, takes the whole latency).
Argv shaping_command(const std::string& ns, const std::string& dev, const LinkSpec& link);

// Everything `up` runs, in order. A failure at any step leaves a partial testbed that
// teardown removes.
std::vector<SetupStep> up_steps(const TestbedSpec& spec);

// `ip netns list`; `ip netns pids NS` (the processes to kill before deleting NS).
Argv list_namespaces_command();
Argv namespace_pids_command(const std::string& ns);
// `ip netns del` of each namespace, in the order given; deleting a namespace removes the
// veth ends and bridges in it, and a veth end takes its peer with it.
std::vector<Argv> delete_namespace_commands(const std::vector<std::string>& namespaces);

}  // namespace moecomm::testbed
