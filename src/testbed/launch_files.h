#pragma once
// How `moecomm testbed run` starts a program across the emulated nodes with Open MPI, as
// pure text and argv (tested without root; testbed.cpp writes and runs them).
//
// mpirun runs inside node 0's namespace, under a UTS namespace of its own with host name
// node0, so that the daemons of the other nodes can connect back to it over the fabric. It
// reaches node k through an "rsh agent" script instead of ssh: the agent runs the daemon in
// node k's network namespace with host name node<k>. Distinct host names keep Open MPI's
// per-host session directories apart; ranks of one node share memory (vader), ranks of
// different nodes talk TCP over the shaped links.
#include <string>
#include <utility>
#include <vector>

#include "testbed/testbed_spec.h"

namespace moecomm::testbed {

// "10.213.0.1 slots=R" per node, in node order: mpirun fills node 0's slots first.
std::string hostfile_text(const TestbedSpec& spec);

// The TCP receive buffer each rank's connections ask for (Open MPI's btl_tcp_rcvbuf): the
// windows of every connection crossing a node or datacenter link fit that link's queue
// (the kernel doubles the value and advertises at most that), within [4 KiB, 16 KiB]; 16 KiB
// carries 160 MB/s per connection over a 0.1 ms round trip, more than the host can drive.
int tcp_receive_buffer_bytes(const TestbedSpec& spec);

// The rsh agent: `agent.sh HOST WORD...` runs WORD... (joined by spaces, a shell command line,
// as ssh would run it) in HOST's namespace with HOST's host name; HOST is a node's address or
// host name.
std::string agent_script(const TestbedSpec& spec);

// The layout, as environment variables for the ranks: MOECOMM_TESTBED_NAME, _NODES,
// _RANKS_PER_NODE, _DATACENTERS, _NODE_LINK_BPS and _DC_LINK_BPS (bytes per second; the
// latter 0 with one datacenter), _NODE_LINK_LATENCY_S and _DC_LINK_LATENCY_S (0 = none).
std::vector<std::pair<std::string, std::string>> layout_environment(const TestbedSpec& spec);

struct LaunchPaths {
  std::string hostfile;  // written by hostfile_text
  std::string agent;     // written by agent_script, executable
  std::string mpirun;    // the mpirun program
};

// The whole command line of `testbed run`: ip netns exec <node 0> unshare --uts sh -c ...
// mpirun ... -np `np` `command`.
std::vector<std::string> mpirun_command(const TestbedSpec& spec, const LaunchPaths& paths, int np,
                                        const std::vector<std::string>& command);

}  // namespace moecomm::testbed
