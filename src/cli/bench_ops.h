#pragma once
// `moecomm bench`: the run executed the very schedule the simulator prices,
// so measured and simulated times line up op by op. Per label (name and phase), the mean
// duration of one op, measured and simulated: a prediction's miss names its op.
#include <string>
#include <vector>

#include "rt/executor.h"
#include "sched/schedule.h"
#include "sim/simulator.h"

namespace moecomm::cli {

struct OpComparison {
  std::string name;                          // the label's name, e.g. "moe.dispatch.a2a"
  std::string phase;                         // "forward", "backward" or "" (sched::to_string)
  int64_t ops = 0;                           // per step, over every rank
  double measured_ms = 0, simulated_ms = 0;  // the mean duration of one op
};

// `measured`: per step, every rank's op times of `run` (rt::TrainResult::op_times, warm-up
// left out); `simulated` and `result`: the step the simulator ran. Rows by measured time per
// step, most first; a label only one side has keeps 0 on the other.
std::vector<OpComparison> compare_ops(const sched::Schedule& run,
                                      const std::vector<std::vector<rt::OpTime>>& measured,
                                      const sched::Schedule& simulated,
                                      const sim::SimResult& result);

}  // namespace moecomm::cli
