#include "rt/replicated_plan.h"

#include <string>

#include "core/error.h"

namespace moecomm::rt {

namespace {

void fail(const std::string& why) {
  throw Error("replication plan", why);
}

}  // namespace

void validate_replica_plan(const ReplicaPlan& plan, int experts, int ranks,
                           int max_experts_per_device) {
  if (ranks <= 0) fail("the EP group is empty");
  if (max_experts_per_device <= 0)
    fail("max experts per device must be >= 1, got " + std::to_string(max_experts_per_device));
  if (static_cast<int>(plan.size()) != experts)
    fail("has " + std::to_string(plan.size()) + " experts, the layer has " +
         std::to_string(experts));
  std::vector<int> hosted(static_cast<size_t>(ranks), 0);
  for (int e = 0; e < experts; ++e) {
    const std::vector<int>& devices = plan[static_cast<size_t>(e)];
    const std::string where = "expert " + std::to_string(e);
    if (devices.empty()) fail(where + " has no device");
    std::vector<bool> seen(static_cast<size_t>(ranks), false);
    for (int d : devices) {
      if (d < 0 || d >= ranks)
        fail(where + ": rank " + std::to_string(d) + " is outside the EP group [0, " +
             std::to_string(ranks) + ")");
      if (seen[static_cast<size_t>(d)]) fail(where + ": rank " + std::to_string(d) + " repeats");
      seen[static_cast<size_t>(d)] = true;
      ++hosted[static_cast<size_t>(d)];
    }
  }
  for (int d = 0; d < ranks; ++d)
    if (hosted[static_cast<size_t>(d)] > max_experts_per_device)
      fail("rank " + std::to_string(d) + " hosts " +
           std::to_string(hosted[static_cast<size_t>(d)]) + " experts, at most " +
           std::to_string(max_experts_per_device) + " per device");
}

std::vector<int> experts_on(const ReplicaPlan& plan, int rank) {
  std::vector<int> out;
  for (size_t e = 0; e < plan.size(); ++e)
    for (int d : plan[e])
      if (d == rank) out.push_back(static_cast<int>(e));
  return out;
}

ReplicaPlan identity_plan(int experts, int ranks) {
  if (ranks <= 0 || experts <= 0 || experts % ranks != 0)
    fail("identity plan: experts (" + std::to_string(experts) +
         ") must be a positive multiple of the EP size (" + std::to_string(ranks) + ")");
  ReplicaPlan plan(static_cast<size_t>(experts));
  for (int e = 0; e < experts; ++e) plan[static_cast<size_t>(e)] = {e / (experts / ranks)};
  return plan;
}

std::vector<int> split_rows(int n, int k, int src) {
  std::vector<int> sizes(static_cast<size_t>(k), n / k);
  const int extra = n % k, first = src % k;
  for (int j = 0; j < extra; ++j) ++sizes[static_cast<size_t>((first + j) % k)];
  return sizes;
}

int plan_fingerprint(const ReplicaPlan& plan) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a over (size, ranks..., -1 separators)
  const auto mix = [&h](int64_t v) {
    h ^= static_cast<uint64_t>(v);
    h *= 1099511628211ull;
  };
  mix(static_cast<int64_t>(plan.size()));
  for (const std::vector<int>& devices : plan) {
    for (int d : devices) mix(d);
    mix(-1);
  }
  return static_cast<int>((h ^ (h >> 32)) & 0x7fffffffu);
}

}  // namespace moecomm::rt
