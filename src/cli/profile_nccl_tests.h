#pragma once
// `moecomm profile --from-nccl-tests FILE...`: a cluster file fitted to the user's own
// nccl-tests output (cost/nccl_tests_output.h reads it, plan/nccl_calibration.h fits it), and
// every measured row beside what `sim --collective` now predicts for it.
#include <iosfwd>
#include <string>
#include <vector>

namespace moecomm::cli {

struct NcclTestsProfile {
  std::vector<std::string> files;
  std::string base_cluster;  // whose device the fitted cluster keeps
  std::string name;          // empty: nccl-tests-<nodes>x<ranks per node>
  std::string out_path;
  bool json = false;
};

int profile_from_nccl_tests(const NcclTestsProfile& request, std::ostream& out);

}  // namespace moecomm::cli
