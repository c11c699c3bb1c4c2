#include "place/routing.h"

#include <numeric>
#include <string>

#include "core/error.h"

namespace moecomm::place {

LayerRouting::LayerRouting(int samples, int tokens, int top_k)
    : samples_(samples), tokens_(tokens), top_k_(top_k) {
  if (samples < 0 || tokens < 0 || top_k < 0) throw Error("routing", "negative shape");
  ids_.assign(static_cast<size_t>(samples) * tokens * top_k, 0);
}

int64_t RoutingCounts::total() const {
  return std::accumulate(num.begin(), num.end(), int64_t{0});
}

RoutingCounts count_routing(const LayerRouting& routing, int experts) {
  RoutingCounts counts(routing.samples(), experts);
  for (int i = 0; i < routing.samples(); ++i) {
    for (int t = 0; t < routing.tokens(); ++t) {
      for (int k = 0; k < routing.top_k(); ++k) {
        const int32_t e = routing.at(i, t, k);
        if (e < 0 || e >= experts) {
          throw Error("routing: sample " + std::to_string(i) + ", token " + std::to_string(t),
                      "expert id " + std::to_string(e) + " is outside [0, " +
                          std::to_string(experts) + ")");
        }
        ++counts.at(i, e);
      }
    }
  }
  return counts;
}

RoutingCounts add_counts(const RoutingCounts& a, const RoutingCounts& b) {
  if (a.samples != b.samples || a.experts != b.experts) {
    throw Error("routing counts", "shapes differ: " + std::to_string(a.samples) + "x" +
                                      std::to_string(a.experts) + " vs " +
                                      std::to_string(b.samples) + "x" + std::to_string(b.experts));
  }
  RoutingCounts sum(a.samples, a.experts);
  for (size_t x = 0; x < sum.num.size(); ++x) sum.num[x] = a.num[x] + b.num[x];
  return sum;
}

}  // namespace moecomm::place
