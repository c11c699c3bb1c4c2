#include "sim/phase_times.h"

#include <algorithm>
#include <array>
#include <string>
#include <utility>
#include <vector>

#include "sched/policy.h"
#include "sched/reported_phase.h"

namespace moecomm::sim {
namespace {

using Intervals = std::vector<std::pair<double, double>>;

double union_length(Intervals v) {
  std::sort(v.begin(), v.end());
  double total = 0, start = 0, end = -1;
  for (const auto& [s, e] : v) {
    if (s > end) {
      total += std::max(0.0, end - start);
      start = s;
      end = e;
    } else {
      end = std::max(end, e);
    }
  }
  return total + std::max(0.0, end - start);
}

// When the rank entered the call: its stream predecessor and its events were done and, if
// a Lina micro-op ran on the rank then, that had ended (the gate is outside the call). A rank
// that enters a collective first waits there for its peers, inside the call, as the
// runtime's timers see it.
double entered_time(const sched::Schedule& schedule, const SimResult& result, sched::OpId id) {
  const OpTiming& t = result.ops[static_cast<size_t>(id)];
  double ready = t.gated_until;
  const sched::OpId prev = schedule.op(id).prev;
  if (prev != sched::kNone) ready = std::max(ready, result.ops[static_cast<size_t>(prev)].end);
  for (sched::OpId dep : schedule.deps(id))
    ready = std::max(ready, result.ops[static_cast<size_t>(dep)].end);
  return std::min(ready, t.start);
}

}  // namespace

PhaseTimes phase_times(const sched::Schedule& schedule, const SimResult& result) {
  const int world = schedule.world_size();
  // Per rank: token forward, token backward, gradient sync.
  std::vector<std::array<Intervals, 3>> per_rank(static_cast<size_t>(world));
  for (sched::OpId id = 0; id < schedule.num_ops(); ++id) {
    const sched::Op& op = schedule.op(id);
    if (!sched::is_collective(op.kind)) continue;
    const sched::ReportedPhase reported = sched::reported_phase(op, schedule.label(id));
    if (reported == sched::ReportedPhase::kNone) continue;
    const int phase = static_cast<int>(reported) - 1;
    // From when the rank entered the call (it waits inside for its peers); Lina's gradient
    // micro-ops from their start: one held back by the gate waits outside the call.
    const OpTiming& t = result.ops[static_cast<size_t>(id)];
    const double from = sched::yields_to_traffic(op) ? t.start : entered_time(schedule, result, id);
    per_rank[static_cast<size_t>(op.rank)][static_cast<size_t>(phase)].emplace_back(from, t.end);
  }
  double sums[3] = {0, 0, 0};
  for (const auto& r : per_rank)
    for (int p = 0; p < 3; ++p) sums[p] += union_length(r[static_cast<size_t>(p)]);
  PhaseTimes out;
  out.token_fwd_s = sums[0] / world;
  out.token_bwd_s = sums[1] / world;
  out.grad_sync_s = sums[2] / world;
  out.iteration_s = result.makespan_s;
  return out;
}

}  // namespace moecomm::sim
