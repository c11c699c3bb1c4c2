#include "infer/replication_planner.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "core/error.h"
#include "infer/popularity_estimator.h"
#include "infer/replica_balancer.h"

namespace moecomm::infer {

namespace {

void validate(const std::vector<double>& popularity, const ReplicationOptions& o) {
  const std::string where = "replication plan";
  if (o.devices < 1)
    throw Error(where + ": devices", "must be at least 1, got " + std::to_string(o.devices));
  if (o.max_experts_per_device < 1)
    throw Error(where + ": max_experts_per_device",
                "must be at least 1, got " + std::to_string(o.max_experts_per_device));
  const int experts = static_cast<int>(popularity.size());
  if (experts < 1) throw Error(where + ": popularity", "has no experts");
  if (static_cast<int64_t>(experts) > int64_t{o.devices} * o.max_experts_per_device)
    throw Error(where, std::to_string(experts) + " experts do not fit on " +
                           std::to_string(o.devices) + " devices x " +
                           std::to_string(o.max_experts_per_device) + " experts per device");
  const long long slots = replica_slots(experts, o.devices, o.max_experts_per_device);
  if (slots > kMaxReplicaSlots)
    throw Error(where, std::to_string(slots) +
                           " replica slots (devices x min(experts, max_experts_per_device)) "
                           "exceed the " +
                           std::to_string(kMaxReplicaSlots) + " the planner takes");
  if (int64_t{o.devices} * experts > kMaxDeviceExperts)
    throw Error(where, std::to_string(o.devices) + " devices x " + std::to_string(experts) +
                           " experts exceed the " + std::to_string(kMaxDeviceExperts) +
                           " the planner takes");
  double sum = 0;
  for (int e = 0; e < experts; ++e) {
    if (!std::isfinite(popularity[e]) || popularity[e] < 0)
      throw Error(where + ": popularity[" + std::to_string(e) + "]",
                  "must be a finite share >= 0, got " + std::to_string(popularity[e]));
    sum += popularity[e];
  }
  if (sum > 1 + 1e-6)
    throw Error(where + ": popularity", "shares sum to " + std::to_string(sum) + ", above 1");
}

}  // namespace

std::vector<std::vector<int>> ReplicationPlan::experts_of_device(int devices) const {
  std::vector<std::vector<int>> out(std::max(devices, 0));
  for (size_t e = 0; e < devices_of_expert.size(); ++e)
    for (int d : devices_of_expert[e])
      if (d >= 0 && d < devices) out[d].push_back(static_cast<int>(e));
  return out;
}

ReplicationPlan plan_replication(const std::vector<double>& popularity,
                                 const ReplicationOptions& options) {
  validate(popularity, options);
  const int n = options.devices;
  const ReplicaPacking packing = balance_replicas(popularity, n, options.max_experts_per_device);
  ReplicationPlan plan;
  plan.devices_of_expert.resize(popularity.size());
  for (int d = 0; d < n; ++d)
    for (int e : packing.experts_of_device[d]) plan.devices_of_expert[e].push_back(d);
  plan.max_over_mean = max_over_mean(expected_device_loads(plan, popularity, n));
  plan.ep_max_over_mean = max_over_mean(expected_device_loads(
      expert_parallel_plan(static_cast<int>(popularity.size()), n), popularity, n));
  return plan;
}

PhaseTwo fine_tune(const ReplicationPlan& phase_one, const std::vector<double>& estimated,
                   const std::vector<int64_t>& actual_counts, int top_k,
                   const ReplicationOptions& options) {
  if (top_k < 1)
    throw Error("phase two: top_k", "must be at least 1, got " + std::to_string(top_k));
  if (phase_one.devices_of_expert.size() != actual_counts.size())
    throw Error("phase two", "the plan has " + std::to_string(phase_one.devices_of_expert.size()) +
                                 " experts, the counts " + std::to_string(actual_counts.size()));
  const std::vector<double> actual = popularity_of_counts(actual_counts);
  if (!same_top_experts(estimated, actual, 2 * top_k))
    return {true, plan_replication(actual, options)};
  PhaseTwo kept{false, phase_one};
  const int n = options.devices, experts = static_cast<int>(actual.size());
  kept.plan.max_over_mean = max_over_mean(expected_device_loads(kept.plan, actual, n));
  kept.plan.ep_max_over_mean =
      max_over_mean(expected_device_loads(expert_parallel_plan(experts, n), actual, n));
  return kept;
}

namespace {

// An expert's load split evenly over its replicas (Sec. 6.2).
template <typename Load>
std::vector<double> loads_under(const ReplicationPlan& plan, const std::vector<Load>& load,
                                int devices, const std::string& where, const char* what) {
  if (devices < 1)
    throw Error(where + ": devices", "must be at least 1, got " + std::to_string(devices));
  if (plan.devices_of_expert.size() != load.size())
    throw Error(where, "the plan has " + std::to_string(plan.devices_of_expert.size()) +
                           " experts, the " + what + " " + std::to_string(load.size()));
  std::vector<double> out(devices, 0.0);
  for (size_t e = 0; e < load.size(); ++e) {
    const auto& on = plan.devices_of_expert[e];
    if (!(load[e] >= 0) || !std::isfinite(static_cast<double>(load[e])))
      throw Error(where + ": " + what + "[" + std::to_string(e) + "]",
                  "must be >= 0, got " + std::to_string(load[e]));
    if (on.empty()) throw Error(where, "expert " + std::to_string(e) + " has no device");
    for (int d : on) {
      if (d < 0 || d >= devices)
        throw Error(where, "expert " + std::to_string(e) + " is on device " + std::to_string(d) +
                               ", outside [0, " + std::to_string(devices) + ")");
      out[d] += static_cast<double>(load[e]) / static_cast<double>(on.size());
    }
  }
  return out;
}

}  // namespace

std::vector<double> device_loads(const ReplicationPlan& plan, const std::vector<int64_t>& counts,
                                 int devices) {
  return loads_under(plan, counts, devices, "device loads", "counts");
}

std::vector<double> expected_device_loads(const ReplicationPlan& plan,
                                          const std::vector<double>& load, int devices) {
  return loads_under(plan, load, devices, "expected device loads", "load");
}

ReplicationPlan expert_parallel_plan(int experts, int devices) {
  if (experts < 1 || devices < 1)
    throw Error("expert-parallel plan", "needs at least one expert and device, got " +
                                            std::to_string(experts) + " and " +
                                            std::to_string(devices));
  ReplicationPlan plan;
  for (int e = 0; e < experts; ++e)
    plan.devices_of_expert.push_back({static_cast<int>(int64_t{e} * devices / experts)});
  return plan;
}

double max_over_mean(const std::vector<double>& loads) {
  double sum = 0, most = 0;
  for (double l : loads) {
    sum += l;
    most = std::max(most, l);
  }
  if (loads.empty() || !(sum > 0)) return 1;
  return most * static_cast<double>(loads.size()) / sum;
}

double ideal_load(const std::vector<int64_t>& counts, int devices) {
  if (devices < 1)
    throw Error("ideal load: devices", "must be at least 1, got " + std::to_string(devices));
  int64_t total = 0;
  for (int64_t c : counts) {
    if (c < 0) throw Error("ideal load: counts", "must be >= 0, got " + std::to_string(c));
    total += c;
  }
  return static_cast<double>(total) / devices;
}

}  // namespace moecomm::infer
