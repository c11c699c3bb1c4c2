#include "testbed/host_checks.h"

#include <cstdint>
#include <fstream>
#include <map>
#include <sstream>

#include "core/error.h"
#include "testbed/host_command.h"

namespace moecomm::testbed {

namespace {

constexpr int kCapNetAdmin = 12;  // linux/capability.h
constexpr int kCapSysAdmin = 21;

// The effective capability set, from the CapEff line of /proc/self/status.
uint64_t effective_capabilities() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("CapEff:", 0) != 0) continue;
    uint64_t caps = 0;
    std::istringstream(line.substr(7)) >> std::hex >> caps;
    return caps;
  }
  return 0;
}

std::string package_of(const std::string& program) {
  static const std::map<std::string, std::string> packages = {{"ip", "iproute2"},
                                                              {"tc", "iproute2"},
                                                              {"unshare", "util-linux"},
                                                              {"mpirun", "openmpi-bin"},
                                                              {"hostname", "hostname"}};
  const auto it = packages.find(program);
  return it == packages.end() ? "" : " (package " + it->second + ")";
}

}  // namespace

bool has_network_privileges() {
  const uint64_t caps = effective_capabilities();
  const uint64_t needed = (uint64_t{1} << kCapNetAdmin) | (uint64_t{1} << kCapSysAdmin);
  return (caps & needed) == needed;
}

void require_network_privileges(const std::string& what) {
  if (has_network_privileges()) return;
  throw Error(what,
              "needs root: network namespaces, links and qdiscs need CAP_SYS_ADMIN and "
              "CAP_NET_ADMIN; run it as root (e.g. with sudo)");
}

void require_programs(const std::string& what, const std::vector<std::string>& programs) {
  for (const std::string& program : programs) {
    if (find_program(program).empty()) {
      throw Error(what, "needs '" + program + "'" + package_of(program) + ", not found on PATH");
    }
  }
}

}  // namespace moecomm::testbed
