#include "infer/replica_balancer.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <queue>
#include <stdexcept>

#include "infer/replica_search.h"

namespace moecomm::infer {

namespace {

// A strictly lighter device must be lighter by more than rounding: relative to the load.
double slack(double load) {
  return 1e-12 * std::max(1.0, std::abs(load));
}

// Improving swaps after the packing, at most (on 100 random layers of up to 256 experts on
// 32 x 16 slots, none needed more than 66 before no swap helped).
constexpr int kImproveRounds = 1000;

// Replicas packed so far: each device's load, experts, and which experts it hosts.
class Packing {
 public:
  Packing(const std::vector<double>& size, int devices, int slots)
      : size_(size),
        slots_(slots),
        load_(static_cast<size_t>(devices), 0.0),
        experts_(static_cast<size_t>(devices)),
        hosts_(static_cast<size_t>(devices), std::vector<char>(size.size(), 0)) {}

  int devices() const { return static_cast<int>(load_.size()); }

  // Heaviest first onto the least loaded device with a free slot and without the expert
  // (ties: fewer replicas, then lower index); when every device with a free slot already
  // hosts it, room is made on a full one (make_room).
  void place(int e) {
    int best = -1;
    for (int d = 0; d < devices(); ++d) {
      if (full(d) || hosts(d, e)) continue;
      if (best < 0 || load_[d] < load_[best] - slack(load_[best]) ||
          (load_[d] <= load_[best] + slack(load_[best]) && used(d) < used(best)))
        best = d;
    }
    if (best < 0) best = make_room(e);
    put(best, e);
  }

  // Swaps (or moves, while slots are free) that lighten the most loaded device, the best
  // each time, until none does: the sorted loads fall lexicographically, so it ends.
  void improve(int max_rounds) {
    for (int round = 0; round < max_rounds; ++round) {
      const int m = heaviest();
      double best = load_[m] - slack(load_[m]);
      int bx = -1, bd = -1, by = -1;  // by = -1: a move
      for (int x : experts_[m]) {
        for (int d = 0; d < devices(); ++d) {
          if (d == m || hosts(d, x)) continue;
          if (!full(d)) {
            const double v = std::max(load_[m] - size_[x], load_[d] + size_[x]);
            if (v < best) best = v, bx = x, bd = d, by = -1;
          }
          for (int y : experts_[d]) {
            if (size_[y] >= size_[x] || hosts(m, y)) continue;
            const double v =
                std::max(load_[m] - size_[x] + size_[y], load_[d] + size_[x] - size_[y]);
            if (v < best) best = v, bx = x, bd = d, by = y;
          }
        }
      }
      if (bx < 0) return;
      take(m, bx);
      put(bd, bx);
      if (by >= 0) {
        take(bd, by);
        put(m, by);
      }
    }
  }

  ReplicaPacking result() const {
    ReplicaPacking p;
    p.experts_of_device = experts_;
    for (auto& es : p.experts_of_device) std::sort(es.begin(), es.end());
    p.max_load = load_[heaviest()];
    return p;
  }

 private:
  bool full(int d) const { return used(d) >= slots_; }
  int used(int d) const { return static_cast<int>(experts_[d].size()); }
  bool hosts(int d, int e) const { return hosts_[d][e] != 0; }
  int heaviest() const {
    return static_cast<int>(std::max_element(load_.begin(), load_.end()) - load_.begin());
  }
  void put(int d, int e) {
    load_[d] += size_[e];
    experts_[d].push_back(e);
    hosts_[d][e] = 1;
  }
  void take(int d, int e) {
    load_[d] -= size_[e];
    experts_[d].erase(std::find(experts_[d].begin(), experts_[d].end(), e));
    hosts_[d][e] = 0;
  }

  // Every device with a free slot (f) hosts e; a full device g without e exists (e has
  // fewer replicas placed than devices), and one of g's S experts x is not on f (which
  // holds fewer than S): x moves to f, e takes its slot on g. The pair with the lightest
  // result is chosen. Returns g.
  int make_room(int e) {
    double best = 0;
    int bf = -1, bg = -1, bx = -1;
    for (int f = 0; f < devices(); ++f) {
      if (full(f)) continue;
      for (int g = 0; g < devices(); ++g) {
        if (!full(g) || hosts(g, e)) continue;
        for (int x : experts_[g]) {
          if (hosts(f, x)) continue;
          const double v = std::max(load_[f] + size_[x], load_[g] - size_[x] + size_[e]);
          if (bf < 0 || v < best - slack(best)) best = v, bf = f, bg = g, bx = x;
        }
      }
    }
    if (bf < 0) throw std::logic_error("replica packing: no room for a replica");
    take(bg, bx);
    put(bf, bx);
    return bg;
  }

  const std::vector<double>& size_;  // per expert: its load per replica
  const int slots_;
  std::vector<double> load_;
  std::vector<std::vector<int>> experts_;
  std::vector<std::vector<char>> hosts_;
};

}  // namespace

long long replica_slots(int experts, int devices, int slots) {
  return static_cast<long long>(devices) * std::min(experts, slots);
}

std::vector<int> greedy_replica_counts(const std::vector<double>& load, int devices,
                                       long long total) {
  std::vector<int> count(load.size(), 1);
  // The top is the expert with the largest load per replica (a / ca > b / cb compared
  // without dividing, so equal loads and counts tie exactly), then fewer replicas, lower id.
  auto after = [&](int a, int b) {
    const double x = load[a] * count[b], y = load[b] * count[a];
    if (x != y) return x < y;
    return count[a] != count[b] ? count[a] > count[b] : a > b;
  };
  std::priority_queue<int, std::vector<int>, decltype(after)> heap(after);
  for (int e = 0; e < static_cast<int>(load.size()); ++e)
    if (devices > 1) heap.push(e);
  for (long long spare = total - std::ssize(load); spare > 0 && !heap.empty(); --spare) {
    const int e = heap.top();
    heap.pop();
    ++count[e];
    if (count[e] < devices) heap.push(e);
  }
  return count;
}

std::vector<int> proportional_replica_counts(const std::vector<double>& load, int devices,
                                             long long total) {
  const double sum = std::accumulate(load.begin(), load.end(), 0.0);
  if (!(sum > 0)) return {};
  const int experts = static_cast<int>(load.size());
  std::vector<double> quota(load.size());
  std::vector<int> count(load.size());
  long long placed = 0;
  for (int e = 0; e < experts; ++e) {
    quota[e] = static_cast<double>(total) * load[e] / sum;  // Eq. 1's n_e, in slots
    count[e] = std::clamp(static_cast<int>(std::floor(quota[e])), 1, devices);
    placed += count[e];
  }
  // The minimum of one replica can overshoot: take from the expert whose load per replica
  // stays the smallest (ties: lower id).
  auto lighter_after = [&](int a, int b) {
    const double x = load[a] * (count[b] - 1), y = load[b] * (count[a] - 1);
    return x != y ? x > y : a > b;
  };
  std::priority_queue<int, std::vector<int>, decltype(lighter_after)> take(lighter_after);
  for (int e = 0; e < experts; ++e)
    if (placed > total && count[e] > 1) take.push(e);
  for (; placed > total; --placed) {
    const int e = take.top();
    take.pop();
    if (--count[e] > 1) take.push(e);
  }
  // Short of the total: one more to the largest remainder quota - count (ties: lower id).
  auto smaller_remainder = [&](int a, int b) {
    const double x = quota[a] - count[a], y = quota[b] - count[b];
    return x != y ? x < y : a > b;
  };
  std::priority_queue<int, std::vector<int>, decltype(smaller_remainder)> add(smaller_remainder);
  for (int e = 0; e < experts; ++e)
    if (placed < total && count[e] < devices) add.push(e);
  for (; placed < total; ++placed) {
    const int e = add.top();
    add.pop();
    if (++count[e] < devices) add.push(e);
  }
  return count;
}

ReplicaPacking pack_replicas(const std::vector<double>& load, const std::vector<int>& count,
                             int devices, int slots) {
  const int experts = static_cast<int>(load.size());
  std::vector<double> size(load.size());
  for (int e = 0; e < experts; ++e) size[e] = load[e] / count[e];
  std::vector<int> order(load.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return size[a] > size[b]; });
  Packing p(size, devices, slots);
  for (int e : order)
    for (int j = 0; j < count[e]; ++j) p.place(e);
  p.improve(kImproveRounds);
  return p.result();
}

ReplicaPacking balance_replicas(const std::vector<double>& load, int devices, int slots) {
  const int experts = static_cast<int>(load.size());
  const long long total = replica_slots(experts, devices, slots);
  ReplicaPacking best =
      pack_replicas(load, greedy_replica_counts(load, devices, total), devices, slots);
  const std::vector<int> proportional = proportional_replica_counts(load, devices, total);
  if (!proportional.empty()) {
    ReplicaPacking p = pack_replicas(load, proportional, devices, slots);
    if (p.max_load < best.max_load - slack(best.max_load)) best = std::move(p);
  }
  if (total <= kExactSlots)
    if (auto exact = search_replicas(load, devices, slots, best.max_load, kExactNodes))
      best = std::move(*exact);
  return best;
}

}  // namespace moecomm::infer
