// What `moecomm bench` reads off a training run: per-step phase times, and the
// routing as the simulator takes it (TrainResult::dispatch_bytes, combine_bytes). The
// matrices must account for every token-path byte the run sent.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <numeric>
#include <string>
#include <vector>

#include "mpi_test_util.h"
#include "rt/train_loop.h"
#include "tiny_train.h"

namespace moecomm::rt {
namespace {

double all_levels(const LinkBytes& b) {
  return static_cast<double>(std::accumulate(b.bytes.begin(), b.bytes.end(), int64_t{0}));
}

double total(const std::vector<std::vector<double>>& matrices) {
  double s = 0;
  for (const auto& m : matrices) s = std::accumulate(m.begin(), m.end(), s);
  return s;
}

// Sum over steps of the token-path bytes, all levels and ranks.
double token_bytes(const TrainResult& r) {
  double s = 0;
  for (const StepReport& step : r.steps) s += all_levels(step.a2a);
  return s;
}

void expect_phase_times(const TrainResult& r) {
  for (const StepReport& s : r.steps) {
    EXPECT_GT(s.token_fwd_ms, 0) << "step " << s.step;
    EXPECT_GT(s.token_bwd_ms, 0) << "step " << s.step;
    EXPECT_GT(s.grad_sync_ms, 0) << "step " << s.step;
    // Means over ranks of wall time inside the step, which is the slowest rank's.
    EXPECT_LE(s.token_fwd_ms + s.token_bwd_ms, s.step_ms) << "step " << s.step;
    EXPECT_LE(s.grad_sync_ms, s.step_ms) << "step " << s.step;
  }
}

TEST(TrainPhases, DispatchMatricesAccountForEveryTokenByteOfThePlainA2A) {
  TrainConfig c = test::tiny_train(1, "baseline");
  c.keep_gradients = false;
  const TrainResult r = train(c);
  expect_phase_times(r);
  const int n = test::world_size();
  ASSERT_EQ(r.dispatch_bytes.size(), 1u);
  ASSERT_EQ(r.dispatch_bytes[0].size(), static_cast<size_t>(n * n));
  EXPECT_TRUE(r.combine_bytes.empty());
  // Dispatch and combine, forward and backward: four A2As per layer move the dispatch's bytes.
  const double per_step_layer = total(r.dispatch_bytes);
  EXPECT_NEAR(4 * per_step_layer * c.model.layers * c.steps, token_bytes(r), 1e-9 * token_bytes(r));
}

TEST(TrainPhases, NetMoeScatterAndGatherMatricesAccountForItsRows) {
  TrainConfig c = test::tiny_train(1, "netmoe");
  c.keep_gradients = false;
  const TrainResult r = train(c);
  expect_phase_times(r);
  ASSERT_EQ(r.dispatch_bytes.size(), 1u);
  ASSERT_EQ(r.combine_bytes.size(), 1u);
  // Rows leave for the experts (scatter) and for the samples' new ranks (gather); the
  // backward sends the gradients back the same ways.
  const double per_step_layer = total(r.dispatch_bytes) + total(r.combine_bytes);
  EXPECT_NEAR(2 * per_step_layer * c.model.layers * c.steps, token_bytes(r), 1e-9 * token_bytes(r));
}

TEST(TrainPhases, TensorParallelGroupsRecordTheSameReplicatedDispatch) {
  if (test::world_size() % 4 != 0) GTEST_SKIP() << "needs 2 logical nodes of TP pairs";
  TrainConfig c = test::tiny_train(2, "monta-o1");
  c.keep_gradients = false;
  const TrainResult r = train(c);
  expect_phase_times(r);
  ASSERT_EQ(r.dispatch_bytes.size(), 2u);  // one EP group per TP index
  EXPECT_EQ(r.dispatch_bytes[0], r.dispatch_bytes[1]);
  EXPECT_GT(total(r.dispatch_bytes), 0);
}

// `bench --trace`: the last step's ops, every rank's, on rank 0 (thread = stream): every op
// lies inside the step, the baseline's A2As appear once per layer and phase, and the gradient
// AllReduces are there; the other ranks get nothing.
TEST(TrainPhases, LastStepCallsCoverEveryRanksOps) {
  TrainConfig c = test::tiny_train(1, "baseline");
  c.keep_gradients = false;
  c.trace_last_step = true;
  const TrainResult r = train(c);
  if (test::world_rank() != 0) {
    EXPECT_TRUE(r.last_step_calls.empty());
    return;
  }
  const int n = test::world_size();
  for (int rank = 0; rank < n; ++rank) {
    int dispatch = 0, combine = 0, grad = 0, gates = 0;
    for (const CallEvent& e : r.last_step_calls) {
      if (e.rank != rank) continue;
      EXPECT_LE(e.begin_s, e.end_s) << e.label;
      EXPECT_GE(e.begin_s, 0) << e.label;
      dispatch += e.label.starts_with("moe.dispatch.a2a");
      combine += e.label.starts_with("moe.combine.a2a");
      grad += e.label.starts_with("grad.");
      gates += e.label.starts_with("gate");
    }
    EXPECT_EQ(dispatch, 2 * c.model.layers) << "rank " << rank;
    EXPECT_EQ(combine, 2 * c.model.layers) << "rank " << rank;
    EXPECT_EQ(gates, 2 * c.model.layers) << "rank " << rank;
    EXPECT_GE(grad, 1) << "rank " << rank;
  }
}

}  // namespace
}  // namespace moecomm::rt
