#include "sim/collective_bench.h"

#include "core/error.h"

namespace moecomm::sim {

using sched::OpKind;

sched::OpKind parse_collective(const std::string& name, const std::string& where) {
  if (name == "alltoall") return OpKind::kAllToAll;
  if (name == "allreduce") return OpKind::kAllReduce;
  if (name == "allgather") return OpKind::kAllGather;
  if (name == "reducescatter") return OpKind::kReduceScatter;
  throw Error(
      where, "unknown collective '" + name + "' (alltoall, allreduce, allgather or reducescatter)");
}

std::string collective_key(sched::OpKind kind) {
  switch (kind) {
    case OpKind::kAllToAll:
      return "alltoall";
    case OpKind::kAllReduce:
      return "allreduce";
    case OpKind::kAllGather:
      return "allgather";
    case OpKind::kReduceScatter:
      return "reducescatter";
    default:
      throw Error("collective", std::string(sched::to_string(kind)) +
                                    " is not measured by nccl-tests' "
                                    "alltoall, allreduce, allgather or reducescatter");
  }
}

double bus_factor(sched::OpKind kind, int n) {
  const double share = (n - 1.0) / n;
  return kind == OpKind::kAllReduce ? 2 * share : share;
}

sched::Schedule collective_schedule(sched::OpKind kind, const std::vector<int>& group, int world,
                                    double bytes) {
  sched::Schedule s(world);
  sched::CollectiveSpec spec;
  spec.kind = kind;
  spec.group = group;
  const size_t n = group.size();
  switch (kind) {
    case OpKind::kAllToAll:
      spec.pair_bytes.assign(n * n, bytes / static_cast<double>(n));
      spec.label.role = sched::OpRole::kDispatchA2A;
      break;
    case OpKind::kAllReduce:
      spec.bytes = bytes;
      spec.label.role = sched::OpRole::kGradDenseAllReduce;
      break;
    case OpKind::kAllGather:
      spec.bytes = bytes;
      spec.label.role = sched::OpRole::kZeroParamAllGather;
      break;
    case OpKind::kReduceScatter:
      spec.bytes = bytes;
      spec.label.role = sched::OpRole::kGradDenseReduceScatter;
      break;
    default:
      collective_key(kind);  // throws
  }
  s.add_collective(spec, 0);
  return s;
}

CollectiveRun simulate_collective(const core::Topology& topology, sched::OpKind kind,
                                  const std::vector<int>& group, double bytes,
                                  const SimOptions& options) {
  if (group.size() < 2) throw Error("collective", "needs at least 2 ranks");
  if (!(bytes > 0)) throw Error("collective", "size must be positive");
  const sched::Schedule s = collective_schedule(kind, group, topology.world_size(), bytes);
  CollectiveRun run;
  run.bytes = bytes;
  run.time_s = simulate(s, topology, options).makespan_s;
  run.algbw = bytes / run.time_s;
  run.busbw = run.algbw * bus_factor(kind, static_cast<int>(group.size()));
  return run;
}

}  // namespace moecomm::sim
