#pragma once
// What each rank did during one step, op by op, so a measured step can be laid beside the
// simulator's schedule of it (`moecomm bench --trace`).
#include <string>

namespace moecomm::rt {

struct CallEvent {
  int rank = 0;
  int thread = 0;                 // the schedule's stream the op ran on
  std::string label;              // the op's label ("moe.dispatch.a2a [layer 0 fwd]")
  std::string what;               // the op's kind ("all_to_all", "compute")
  double begin_s = 0, end_s = 0;  // since the step's common start
};

}  // namespace moecomm::rt
