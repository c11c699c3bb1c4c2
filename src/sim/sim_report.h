#pragma once
// What `moecomm sim` reports of a run: iteration, forward and backward time and, per op
// kind, counts, sizes and the time ranks spend in them.
#include <array>

#include <nlohmann/json.hpp>

#include "sched/schedule.h"
#include "sim/simulator.h"

namespace moecomm::sim {

struct KindReport {
  int64_t ops = 0;
  double flops = 0;
  double bytes = 0;
  double busy_s_per_rank = 0;  // summed op durations of this kind, averaged over ranks
};

struct SimReport {
  double iteration_s = 0;  // makespan
  double forward_s = 0;    // first forward op's start to the last forward op's end
  double backward_s = 0;   // last forward op's end to the last backward op's end
  std::array<KindReport, sched::kNumOpKinds> kinds{};
};

SimReport make_report(const sched::Schedule& schedule, const SimResult& result);
// {"iteration_ms", "forward_ms", "backward_ms", "ops": {kind: {count, flops, bytes,
// busy_ms_per_rank}}, "busiest_links": [{name, bytes, busy_ms}], "bytes_by_level" (outermost
// level first), "flows"}; counts, flops and bytes are totals over all ranks, bytes whole.
nlohmann::json report_to_json(const SimReport& report, const SimResult& result);

}  // namespace moecomm::sim
