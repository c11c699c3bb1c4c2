#include "infer/replica_search.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace moecomm::infer {

namespace {

double slack(double load) {
  return 1e-12 * std::max(1.0, std::abs(load));
}

class Search {
 public:
  Search(const std::vector<double>& load, int devices, int slots, double bound, long long budget)
      : w_(load),
        devices_(devices),
        slots_(std::min(slots, static_cast<int>(load.size()))),  // all D x E when E < S
        experts_(static_cast<int>(load.size())),
        order_(load.size()),
        load_(static_cast<size_t>(devices), 0.0),
        hosted_(static_cast<size_t>(devices)),
        best_(bound),
        budget_(budget) {
    std::iota(order_.begin(), order_.end(), 0);
    std::stable_sort(order_.begin(), order_.end(), [&](int a, int b) { return w_[a] > w_[b]; });
  }

  std::optional<ReplicaPacking> run() {
    // No device is lighter than the mean.
    const double mean = std::accumulate(w_.begin(), w_.end(), 0.0) / devices_;
    if (mean < best_ - slack(best_)) expert(0, replica_slots(experts_, devices_, slots_));
    if (!found_) return std::nullopt;
    for (auto& es : best_hosted_) std::sort(es.begin(), es.end());
    return ReplicaPacking{best_hosted_, best_};
  }

 private:
  int used(int d) const { return static_cast<int>(hosted_[d].size()); }
  bool over_budget() { return ++nodes_ > budget_; }
  double max_load() const { return *std::max_element(load_.begin(), load_.end()); }

  void record() {
    const double m = max_load();
    if (m >= best_ - slack(best_)) return;
    best_ = m;
    best_hosted_ = hosted_;
    found_ = true;
  }

  // Expert order_[i] and the ones after it, into `free` free slots.
  void expert(int i, long long free) {
    if (over_budget()) return;
    if (i == experts_) {
      if (free == 0) record();
      return;
    }
    const int e = order_[i];
    if (w_[e] == 0) return zero_tail(i, free);
    const long long after = experts_ - i - 1;  // each needs a slot, and takes at most D
    std::vector<int> open;
    for (int d = 0; d < devices_; ++d)
      if (used(d) < slots_) open.push_back(d);
    std::sort(open.begin(), open.end(), [&](int a, int b) {
      if (load_[a] != load_[b]) return load_[a] < load_[b];
      return used(a) != used(b) ? used(a) < used(b) : a < b;
    });
    const long long most = std::min<long long>({devices_, free - after, std::ssize(open)});
    for (long long r = most; r >= 1 && free - r <= after * devices_; --r)
      choose(i, free - r, e, w_[e] / static_cast<double>(r), static_cast<int>(r), open, 0);
  }

  // `need` more devices for e's replicas from open[from..], each a different one; devices
  // alike in load and free slots are tried once per position.
  void choose(int i, long long free_after, int e, double size, int need,
              const std::vector<int>& open, size_t from) {
    if (need == 0) return expert(i + 1, free_after);
    for (size_t j = from; j + static_cast<size_t>(need) <= open.size(); ++j) {
      const int d = open[j];
      if (j > from && load_[d] == load_[open[j - 1]] && used(d) == used(open[j - 1])) continue;
      if (load_[d] + size >= best_ - slack(best_)) break;  // open is sorted by load
      if (over_budget()) return;
      load_[d] += size;
      hosted_[d].push_back(e);
      choose(i, free_after, e, size, need - 1, open, j + 1);
      hosted_[d].pop_back();
      load_[d] -= size;
    }
  }

  // Experts order_[i..] all have load 0: they fit when each device's free slots are at most
  // their number Z and the free slots are between Z and Z D; then walking them round-robin
  // over the free slots gives each one at least one replica and a device never two.
  void zero_tail(int i, long long free) {
    const int z = experts_ - i;
    if (free < z || free > static_cast<long long>(z) * devices_) return;
    for (int d = 0; d < devices_; ++d)
      if (slots_ - used(d) > z) return;
    const auto before = hosted_;
    int next = 0;
    for (int d = 0; d < devices_; ++d)
      for (int k = used(d); k < slots_; ++k) hosted_[d].push_back(order_[i + next++ % z]);
    record();
    hosted_ = before;
  }

  const std::vector<double>& w_;
  const int devices_, slots_, experts_;
  std::vector<int> order_;  // heaviest first
  std::vector<double> load_;
  std::vector<std::vector<int>> hosted_, best_hosted_;
  double best_;
  const long long budget_;
  long long nodes_ = 0;
  bool found_ = false;
};

}  // namespace

std::optional<ReplicaPacking> search_replicas(const std::vector<double>& load, int devices,
                                              int slots, double bound, long long node_budget) {
  return Search(load, devices, slots, bound, node_budget).run();
}

}  // namespace moecomm::infer
