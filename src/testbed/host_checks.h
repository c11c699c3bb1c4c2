#pragma once
// What a testbed needs from this machine, checked before anything is made so that a missing
// piece is one clear error rather than a half-built testbed.
#include <string>
#include <vector>

namespace moecomm::testbed {

// Whether this process may create network namespaces and shape links: CAP_SYS_ADMIN (to
// mount the namespace files) and CAP_NET_ADMIN (links, addresses, qdiscs), which root has.
bool has_network_privileges();

// Throws Error saying that `what` ("testbed up") needs root, unless has_network_privileges().
void require_network_privileges(const std::string& what);

// Throws Error naming the first program of `programs` not on PATH and its package.
void require_programs(const std::string& what, const std::vector<std::string>& programs);

}  // namespace moecomm::testbed
