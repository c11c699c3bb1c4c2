#include "sched/hybrid_routing.h"

#include <numeric>

#include "core/error.h"

namespace moecomm::sched {

HybridRouting::HybridRouting(int n, int domain, std::vector<int> order, const std::string& where)
    : domain_(domain), order_(std::move(order)) {
  if (domain < 1 || n < 1 || n % domain != 0)
    throw Error(where, "hybrid_domain=" + std::to_string(domain) + " must divide the EP group's " +
                           std::to_string(n) + " ranks");
  if (order_.empty()) {
    order_.resize(static_cast<size_t>(n));
    std::iota(order_.begin(), order_.end(), 0);
  }
  position_.assign(static_cast<size_t>(n), -1);
  bool permutation = static_cast<int>(order_.size()) == n;
  for (int p = 0; permutation && p < n; ++p) {
    const int m = order_[static_cast<size_t>(p)];
    permutation = m >= 0 && m < n && position_[static_cast<size_t>(m)] < 0;
    if (permutation) position_[static_cast<size_t>(m)] = p;
  }
  if (!permutation)
    throw Error(where, "the member order is no permutation of the EP group's " + std::to_string(n) +
                           " members");
}

std::vector<int> HybridRouting::destinations(int member) const {
  std::vector<int> out;
  for (int d = 0; d < domains(); ++d) out.push_back(destination(member, d));
  return out;
}

std::vector<int> HybridRouting::domain_members(int d) const {
  const auto first = order_.begin() + static_cast<std::ptrdiff_t>(d) * domain_;
  return {first, first + domain_};
}

}  // namespace moecomm::sched
