#pragma once
// Helpers for the runtime's tests: every rank runs every test; data is a pure function of
// (source, destination, index) so each rank can compute the reference locally.
#include <cstdint>
#include <numeric>
#include <string>
#include <vector>

#include "core/rank_groups.h"
#include "rt/mpi_base.h"
#include "sched/op.h"

namespace moecomm::rt::test {

// Collectives in tests: long enough for 8 oversubscribed ranks, short enough to fail a hang.
inline constexpr double kTimeout = 20;

inline int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}
inline int world_size() {
  int n = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}
inline core::RankGroup all_ranks() {
  core::RankGroup g(world_size());
  std::iota(g.begin(), g.end(), 0);
  return g;
}

inline sched::Label label(sched::OpRole role, int layer = -1,
                          sched::Phase phase = sched::Phase::kNone) {
  sched::Label l;
  l.role = role;
  l.layer = layer;
  l.phase = phase;
  return l;
}

// Elements global rank `src` sends `dst` (zeros included, the diagonal too).
inline int64_t pair_count(int src, int dst, int salt = 0) {
  return (src * 7 + dst * 3 + salt) % 5;
}
inline float pair_value(int src, int dst, int64_t i) {
  return static_cast<float>(src * 10000 + dst * 100 + i);
}

// This member's send blocks for `group` (member j gets pair_count(me, group[j]) values).
struct SendBlocks {
  std::vector<float> data;
  std::vector<int64_t> counts;
};
inline SendBlocks send_blocks(const core::RankGroup& group, int me, int salt = 0) {
  SendBlocks s;
  for (int dst : group) {
    s.counts.push_back(pair_count(me, dst, salt));
    for (int64_t i = 0; i < s.counts.back(); ++i) s.data.push_back(pair_value(me, dst, i));
  }
  return s;
}
// What `me` must receive: every member's block for it, in member order.
inline std::vector<float> expected_blocks(const core::RankGroup& group, int me, int salt = 0) {
  std::vector<float> out;
  for (int src : group) {
    for (int64_t i = 0; i < pair_count(src, me, salt); ++i) out.push_back(pair_value(src, me, i));
  }
  return out;
}
// The group's pair matrix in bytes of fp32 elements, as a schedule's A2A carries it.
inline std::vector<double> pair_bytes(const core::RankGroup& group, int salt = 0) {
  std::vector<double> m;
  for (int src : group) {
    for (int dst : group) m.push_back(4.0 * pair_count(src, dst, salt));
  }
  return m;
}

}  // namespace moecomm::rt::test
