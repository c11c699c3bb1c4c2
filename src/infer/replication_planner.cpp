#include "infer/replication_planner.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "core/error.h"
#include "infer/popularity_estimator.h"

namespace moecomm::infer {

namespace {

constexpr double kEps = 1e-9;  // a device filled to 1 + kEps still counts as full, not over

struct Item {
  int expert = 0;
  double size = 0;  // share of one device's capacity
};

struct Devices {
  std::vector<double> load;
  std::vector<std::vector<int>> experts;
  int opened = 0;  // devices [0, opened) used by packing so far

  explicit Devices(int n) : load(n, 0.0), experts(n) {}
  int size() const { return static_cast<int>(load.size()); }
  bool can_host(int d, int e, int max_experts) const {
    return static_cast<int>(experts[d].size()) < max_experts &&
           std::find(experts[d].begin(), experts[d].end(), e) == experts[d].end();
  }
  void put(int d, int e, double s) {
    load[d] += s;
    experts[d].push_back(e);
  }
  // The least loaded device in [0, end) that can host e (ties: fewest experts, lowest
  // index); -1 if none.
  int least_loaded(int end, int e, int max_experts) const {
    int best = -1;
    for (int d = 0; d < end; ++d) {
      if (!can_host(d, e, max_experts)) continue;
      if (best < 0 || load[d] < load[best] - kEps ||
          (load[d] <= load[best] + kEps && experts[d].size() < experts[best].size()))
        best = d;
    }
    return best;
  }
};

// First-fit decreasing (Lina Sec. 5.2) into devices of capacity 1: the first open device
// the item fits; else a new one while fewer than `budget` are open; else the least loaded
// open device with room; else any device with room. Returns false if some item found no
// device at all (every one full or already hosting its expert).
bool pack(std::vector<Item> items, int budget, int max_experts, Devices& dev) {
  std::sort(items.begin(), items.end(), [](const Item& a, const Item& b) {
    return a.size != b.size ? a.size > b.size : a.expert < b.expert;
  });
  bool all = true;
  for (const Item& it : items) {
    int d = -1;
    for (int c = 0; c < dev.opened && d < 0; ++c)
      if (dev.load[c] + it.size <= 1 + kEps && dev.can_host(c, it.expert, max_experts)) d = c;
    if (d < 0 && dev.opened < std::min(budget, dev.size())) d = dev.opened++;
    if (d < 0) d = dev.least_loaded(dev.opened, it.expert, max_experts);
    if (d < 0) d = dev.least_loaded(dev.size(), it.expert, max_experts);
    if (d < 0) {
      all = false;
      continue;
    }
    dev.opened = std::max(dev.opened, d + 1);
    dev.put(d, it.expert, it.size);
  }
  return all;
}

std::vector<Item> replicas(const std::vector<int>& estimated, const std::vector<double>& size,
                           const std::vector<int>& count) {
  std::vector<Item> items;
  for (int e : estimated)
    for (int j = 0; j < count[e]; ++j) items.push_back({e, size[e] / count[e]});
  return items;
}

int devices_needed(const std::vector<Item>& items, int max_experts) {
  Devices dev(static_cast<int>(items.size()));
  pack(items, dev.size(), max_experts, dev);
  return dev.opened;
}

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
  const int experts = static_cast<int>(popularity.size());
  const int n = options.devices, max_experts = options.max_experts_per_device;
  std::vector<int> estimated, unestimated;
  double sum = 0;
  for (int e = 0; e < experts; ++e) {
    (popularity[e] > 0 ? estimated : unestimated).push_back(e);
    sum += popularity[e];
  }
  const int est = static_cast<int>(estimated.size());

  // Devices for the estimated experts: N sum pop by Eq. 1, the rest stay free for the
  // unestimated ones; never fewer than their packing needs, never idle if nobody else.
  int budget = 0;
  if (est > 0) {
    budget = unestimated.empty() ? n : static_cast<int>(std::lround(n * sum));
    budget = std::clamp(budget, (est + max_experts - 1) / max_experts, n);
  }
  std::vector<double> size(experts, 0.0);  // n_e scaled so the budget is used up
  for (int e : estimated) size[e] = budget * popularity[e] / sum;

  // Replicas proportional to popularity: one more to the heaviest replica while FFD fits.
  std::vector<int> count(experts, 0);
  for (int e : estimated) count[e] = 1;
  int64_t slots = est + static_cast<int64_t>(unestimated.size());
  while (slots < int64_t{n} * max_experts) {
    int heaviest = -1;
    for (int e : estimated)
      if (count[e] < budget &&
          (heaviest < 0 || size[e] / count[e] > size[heaviest] / count[heaviest] + kEps))
        heaviest = e;
    if (heaviest < 0) break;
    ++count[heaviest];
    if (devices_needed(replicas(estimated, size, count), max_experts) > budget) {
      --count[heaviest];
      break;
    }
    ++slots;
  }

  Devices dev(n);
  pack(replicas(estimated, size, count), budget, max_experts, dev);
  // Unestimated experts: evenly over the free devices, else onto the least loaded one.
  const int first_free = dev.opened, free = n - dev.opened;
  for (size_t j = 0; j < unestimated.size(); ++j) {
    const int e = unestimated[j];
    int d = free > 0 ? first_free + static_cast<int>(j % free) : -1;
    if (d < 0 || !dev.can_host(d, e, max_experts)) d = dev.least_loaded(n, e, max_experts);
    if (d < 0) throw std::logic_error("replication plan: no room left for an expert");
    dev.put(d, e, 0.0);
  }

  ReplicationPlan plan;
  plan.devices_of_expert.resize(experts);
  for (int d = 0; d < n; ++d)
    for (int e : dev.experts[d]) plan.devices_of_expert[e].push_back(d);
  for (int e = 0; e < experts; ++e)
    if (plan.devices_of_expert[e].empty())  // replicas are dropped, never a first one
      throw std::logic_error("replication plan: expert " + std::to_string(e) + " unplaced");
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
  if (same_top_experts(estimated, actual, 2 * top_k)) return {false, phase_one};
  return {true, plan_replication(actual, options)};
}

std::vector<double> device_loads(const ReplicationPlan& plan, const std::vector<int64_t>& counts,
                                 int devices) {
  const std::string where = "device loads";
  if (devices < 1)
    throw Error(where + ": devices", "must be at least 1, got " + std::to_string(devices));
  if (plan.devices_of_expert.size() != counts.size())
    throw Error(where, "the plan has " + std::to_string(plan.devices_of_expert.size()) +
                           " experts, the counts " + std::to_string(counts.size()));
  std::vector<double> load(devices, 0.0);
  for (size_t e = 0; e < counts.size(); ++e) {
    const auto& on = plan.devices_of_expert[e];
    if (counts[e] < 0)
      throw Error(where + ": counts[" + std::to_string(e) + "]",
                  "must be >= 0, got " + std::to_string(counts[e]));
    if (on.empty()) throw Error(where, "expert " + std::to_string(e) + " has no device");
    for (int d : on) {
      if (d < 0 || d >= devices)
        throw Error(where, "expert " + std::to_string(e) + " is on device " + std::to_string(d) +
                               ", outside [0, " + std::to_string(devices) + ")");
      load[d] += static_cast<double>(counts[e]) / static_cast<double>(on.size());
    }
  }
  return load;
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
