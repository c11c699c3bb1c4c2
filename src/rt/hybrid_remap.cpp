#include "rt/hybrid_remap.h"

#include "rt/row_bytes.h"
#include "sched/hybrid_routing.h"

namespace moecomm::rt {

HybridRemap::HybridRemap(int a2a_size, int domain, const std::vector<int>& order, int member)
    : a2a_size_(a2a_size),
      member_of_(
          sched::HybridRouting(a2a_size, domain, order, "hybrid_domain").destinations(member)) {}

OpBuffer* HybridRemap::to_members(OpBuffer& buf) const {
  if (identity()) return &buf;
  const auto blocks = blocks_of(buf.data, buf.counts);
  std::vector<int64_t> counts(size_t(a2a_size_), 0), recv(size_t(a2a_size_), 0);
  std::vector<const std::vector<std::byte>*> at(size_t(a2a_size_), nullptr);
  for (size_t j = 0; j < member_of_.size(); ++j) {
    const size_t m = size_t(member_of_[j]);
    counts[m] = buf.counts[j];
    if (!buf.recv_counts.empty()) recv[m] = buf.recv_counts[j];
    at[m] = &blocks[j];
  }
  buf.data.clear();
  for (const auto* b : at)
    if (b) buf.data.insert(buf.data.end(), b->begin(), b->end());
  buf.counts = std::move(counts);
  if (!buf.recv_counts.empty()) buf.recv_counts = std::move(recv);
  return &buf;
}

void HybridRemap::from_members(OpBuffer& buf) const {
  if (identity()) return;
  const auto blocks = blocks_of(buf.data, buf.counts);
  std::vector<int64_t> counts;
  buf.data.clear();
  for (int m : member_of_) {
    counts.push_back(buf.counts[size_t(m)]);
    buf.data.insert(buf.data.end(), blocks[size_t(m)].begin(), blocks[size_t(m)].end());
  }
  buf.counts = std::move(counts);
}

}  // namespace moecomm::rt
