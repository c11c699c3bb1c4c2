#include "sim/sim_report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include "core/error.h"

namespace moecomm::sim {

SimReport make_report(const sched::Schedule& schedule, const SimResult& result) {
  SimReport r;
  r.iteration_s = result.makespan_s;
  double fwd_start = result.makespan_s, fwd_end = 0, bwd_end = 0;
  const sched::Totals totals = schedule.totals();
  for (int k = 0; k < sched::kNumOpKinds; ++k) {
    r.kinds[k].ops = totals[k].ops;
    r.kinds[k].flops = totals[k].flops;
    r.kinds[k].bytes = totals[k].bytes;
  }
  for (sched::OpId id = 0; id < schedule.num_ops(); ++id) {
    const OpTiming& t = result.ops[id];
    r.kinds[static_cast<size_t>(schedule.op(id).kind)].busy_s_per_rank += t.end - t.start;
    switch (schedule.label(id).phase) {
      case sched::Phase::kForward:
        fwd_start = std::min(fwd_start, t.start);
        fwd_end = std::max(fwd_end, t.end);
        break;
      case sched::Phase::kBackward:
        bwd_end = std::max(bwd_end, t.end);
        break;
      default:
        break;
    }
  }
  for (KindReport& k : r.kinds) k.busy_s_per_rank /= std::max(1, schedule.world_size());
  r.forward_s = fwd_end > 0 ? fwd_end - fwd_start : 0;
  r.backward_s = bwd_end > fwd_end ? bwd_end - fwd_end : 0;
  return r;
}

namespace {

// Bytes are whole: sums of fractional flow sizes (a capacity factor's share of a token row)
// carry the sum's rounding, 2619211775.999999 for 2619211776. A total past 2^62 (4.6 EB) is
// refused rather than wrapped: llround has no 64-bit answer for it.
int64_t whole_bytes(double bytes, const std::string& what) {
  if (!(bytes >= 0 && bytes < 0x1p62)) {
    char total[32];
    std::snprintf(total, sizeof total, "%.3g", bytes);
    throw Error("simulation", what + " total " + total +
                                  " bytes, beyond 64-bit counts: reduce seq_len, micro_batch, "
                                  "layers or the cluster's size");
  }
  return std::llround(bytes);
}

}  // namespace

nlohmann::json report_to_json(const SimReport& report, const SimResult& result) {
  nlohmann::json ops = nlohmann::json::object();
  for (int k = 0; k < sched::kNumOpKinds; ++k) {
    const KindReport& kr = report.kinds[k];
    if (kr.ops == 0) continue;
    const std::string kind(sched::to_string(static_cast<sched::OpKind>(k)));
    ops[kind] = {{"count", kr.ops},
                 {"flops", kr.flops},
                 {"bytes", whole_bytes(kr.bytes, "the step's " + kind + " ops")},
                 {"busy_ms_per_rank", kr.busy_s_per_rank * 1e3}};
  }
  nlohmann::json links = nlohmann::json::array();
  for (const LinkUsage& l : result.busiest_links) {
    links.push_back({{"name", l.name},
                     {"bytes", whole_bytes(l.bytes, "link " + l.name)},
                     {"busy_ms", l.busy_s * 1e3}});
  }
  std::vector<int64_t> by_level;
  for (double bytes : result.bytes_by_level)
    by_level.push_back(whole_bytes(bytes, "a level's links"));
  return {{"iteration_ms", report.iteration_s * 1e3},
          {"forward_ms", report.forward_s * 1e3},
          {"backward_ms", report.backward_s * 1e3},
          {"ops", ops},
          {"busiest_links", links},
          {"bytes_by_level", by_level},
          {"flows", result.flows}};
}

}  // namespace moecomm::sim
