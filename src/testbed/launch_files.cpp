#include "testbed/launch_files.h"

#include <algorithm>
#include <cstdlib>
#include <sstream>
#include <utility>

#include "testbed/link_spec.h"
#include "testbed/setup_commands.h"

namespace moecomm::testbed {

namespace {

// Sets the host name, then runs the rest of the arguments: sh -c SCRIPT NAME PROGRAM ARGS...
// (the shell's $0 is the host name, "$@" the program).
constexpr const char* kHostnameThenExec = "hostname \"$0\" && exec \"$@\"";

// Bytes the qdisc of one end of `link` queues behind its bucket.
double queue_bytes(const LinkSpec& link) {
  if (link.latency_s > 0) return 1500.0 * netem_limit_packets(link.rate_Bps, link.latency_s / 2);
  const TbfParams p = tbf_params(link.rate_Bps);
  return static_cast<double>(p.limit_bytes - p.burst_bytes);
}

}  // namespace

int tcp_receive_buffer_bytes(const TestbedSpec& spec) {
  const double world = double(spec.nodes) * spec.ranks_per_node;
  const double node_ranks = spec.ranks_per_node;
  double bytes = queue_bytes(spec.node_link) / (2 * node_ranks * (world - node_ranks));
  if (spec.dc_link) {
    const double dc_ranks = node_ranks * spec.nodes_per_datacenter();
    bytes = std::min(bytes, queue_bytes(*spec.dc_link) / (2 * dc_ranks * (world - dc_ranks)));
  }
  return static_cast<int>(std::clamp(bytes, 4096.0, 16384.0));
}

std::string hostfile_text(const TestbedSpec& spec) {
  std::ostringstream text;
  text << "# moecomm testbed " << spec.name << ": one line per emulated node\n";
  for (int k = 0; k < spec.nodes; ++k) {
    text << spec.node_address(k) << " slots=" << spec.ranks_per_node << "\n";
  }
  return text.str();
}

std::string agent_script(const TestbedSpec& spec) {
  std::ostringstream s;
  s << "#!/bin/sh\n"
    << "# Open MPI's rsh agent for moecomm testbed " << spec.name << " (written by `moecomm\n"
    << "# testbed up`). Open MPI calls it as `agent.sh HOST WORD...`, WORD... being a shell\n"
    << "# command line split into words, as it would hand them to ssh; this runs that line in\n"
    << "# HOST's network namespace under HOST's own host name.\n"
    << "PATH=\"$PATH:/usr/sbin:/sbin\"\n"
    << "host=$1\n"
    << "shift\n"
    << "case $host in\n";
  for (int k = 0; k < spec.nodes; ++k) {
    s << "  " << spec.node_address(k) << "|" << spec.node_hostname(k)
      << ") ns=" << spec.node_namespace(k) << " node=" << spec.node_hostname(k) << " ;;\n";
  }
  s << "  *) echo \"moecomm testbed " << spec.name
    << ": no node '$host' (agent.sh)\" >&2; exit 255 ;;\n"
    << "esac\n"
    << "exec ip netns exec \"$ns\" unshare --uts sh -c 'hostname \"$0\" && exec sh -c \"$*\"' "
       "\"$node\" \"$@\"\n";
  return s.str();
}

std::vector<std::pair<std::string, std::string>> layout_environment(const TestbedSpec& spec) {
  const double dc_rate = spec.dc_link ? spec.dc_link->rate_Bps : 0;
  const double dc_latency = spec.dc_link ? spec.dc_link->latency_s : 0;
  return {{"MOECOMM_TESTBED_NAME", spec.name},
          {"MOECOMM_TESTBED_NODES", std::to_string(spec.nodes)},
          {"MOECOMM_TESTBED_RANKS_PER_NODE", std::to_string(spec.ranks_per_node)},
          {"MOECOMM_TESTBED_DATACENTERS", std::to_string(spec.datacenters)},
          {"MOECOMM_TESTBED_NODE_LINK_BPS", format_number(spec.node_link.rate_Bps)},
          {"MOECOMM_TESTBED_DC_LINK_BPS", format_number(dc_rate)},
          {"MOECOMM_TESTBED_NODE_LINK_LATENCY_S", format_number(spec.node_link.latency_s)},
          {"MOECOMM_TESTBED_DC_LINK_LATENCY_S", format_number(dc_latency)}};
}

std::vector<std::string> mpirun_command(const TestbedSpec& spec, const LaunchPaths& paths, int np,
                                        const std::vector<std::string>& command) {
  std::vector<std::string> argv;
  auto add = [&argv](std::initializer_list<std::string> words) { argv.insert(argv.end(), words); };
  add({"ip", "netns", "exec", spec.node_namespace(0)});
  add({"unshare", "--uts", "sh", "-c", kHostnameThenExec, spec.node_hostname(0)});
  add({paths.mpirun, "--hostfile", paths.hostfile, "-np", std::to_string(np)});
  // Ranks fill node 0's slots, then node 1's, ...; more ranks than slots are allowed (the
  // emulated nodes share this machine's cores), and binding is off for the same reason.
  add({"--map-by", "slot", "--oversubscribe", "--bind-to", "none"});
  add({"--mca", "plm", "rsh", "--mca", "plm_rsh_agent", paths.agent});
  // mpirun starts every daemon itself, and they stay its children (no --daemonize), so a time
  // limit that stops mpirun's process tree stops them all.
  add({"--mca", "plm_rsh_no_tree_spawn", "1", "--mca", "orte_leave_session_attached", "1"});
  add({"--mca", "btl", "self,vader,tcp", "--mca", "btl_tcp_if_include", kSubnet});
  add({"--mca", "oob_tcp_if_include", kSubnet});
  // The emulated nodes share the host's cores: a rank spinning in MPI_Wait would starve the
  // ranks it shares a core with (measured: a 4-byte AllReduce over 8 ranks on 2 cores took
  // 14-84 ms spinning, 0.5 ms yielding).
  add({"--mca", "mpi_yield_when_idle", "1"});
  // A link's tbf queue is one FIFO: TCP connections with autotuned windows overflow it, and
  // the drops leave equal flows of one A2A ending up to 3x apart. Windows that fit the queue
  // together share it per flow without drops (measured at 2 x 4 ranks, 50 Mbit/s: the
  // baseline's step 8% and its gradient sync 13% faster).
  add({"--mca", "btl_tcp_rcvbuf", std::to_string(tcp_receive_buffer_bytes(spec))});
  for (const auto& [name, value] : layout_environment(spec)) add({"-x", name + "=" + value});
  // Defaults the user's own values override. One compute thread per rank: the ranks already
  // share the host's cores, and BLAS threads that spin between GEMMs would take them from the
  // others. Communication threads before compute, as a GPU's copy engines and NIC never wait
  // for its SMs (rt/thread_priority.h): measured at 2 x 4 ranks, HybridEP's step came 5%
  // nearer the simulator's.
  for (const auto& [name, value] : {std::pair{"OPENBLAS_NUM_THREADS", "1"},
                                    {"OMP_NUM_THREADS", "1"},
                                    {"MOECOMM_COMM_THREAD_NICE", "-10"}})  // rt's variable
    add({"-x", std::getenv(name) ? std::string(name) : std::string(name) + "=" + value});
  argv.insert(argv.end(), command.begin(), command.end());
  return argv;
}

}  // namespace moecomm::testbed
