#include "hang_scenario.h"

#include <chrono>
#include <thread>

#include "mpi_test_util.h"
#include "rt/executor.h"

namespace moecomm::rt::test {

int hang_scenario() {
  const int n = world_size(), me = world_rank();
  sched::Schedule s(n);
  std::vector<std::vector<sched::OpId>> deps;
  std::vector<sched::OpId> stall;
  for (int r = 0; r < n; ++r) {
    stall.push_back(s.add_compute(r, 0, 0, 0, label(sched::OpRole::kAttention)));
    deps.push_back({stall.back()});
  }
  sched::CollectiveSpec a2a;
  a2a.kind = sched::OpKind::kAllToAll;
  a2a.group = all_ranks();
  a2a.pair_bytes.assign(size_t(n) * n, 64.0);
  a2a.label = label(sched::OpRole::kDispatchA2A, 0, sched::Phase::kForward);
  s.add_collective(a2a, 0, deps);
  Executor executor(MPI_COMM_WORLD, s, {.timeout_s = kHangTimeout, .ranks_per_node = 2});
  if (me == n - 1) {  // stops sending: never joins the A2A within anyone's timeout
    executor.set_kernel(stall[me], [] { std::this_thread::sleep_for(std::chrono::seconds(60)); });
  }
  executor.run();
  return 0;
}

}  // namespace moecomm::rt::test
