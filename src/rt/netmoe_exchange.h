#pragma once
// nn::SampleExchange over MPI for placement=netmoe (NetMoE Sec. 3, Alg. 1): the scatter and
// gather rows by flat A2A-v over the EP group, each row's metadata riding in the same A2A as
// trailing columns (counted apart, so that row bytes compare with the simulator's; the
// layout's counts go by a small int A2A-v), and the placement of each layer
// solved by place::AsyncSamplePlacer on its background thread between submit (after the
// gate) and collect (before the gather). Every member gathers the group's per-sample counts
// and solves the same deterministic problem, so all members agree without a broadcast.
// With chunks (FSMoE Fig. 3d, Lina's A2A/FFN micro-ops) the layer's pipeline runs chunk i's
// experts on the calling thread while one communication thread runs the exchanges in the
// order S_0, S_1, G_0, S_2, G_1, ..., G_{n-1} on the EP communicator (tp_chunk_pipeline.h).
#include <atomic>
#include <vector>

#include "nn/sample_moving_moe.h"
#include "place/async_sample_placer.h"
#include "rt/a2a_activity.h"
#include "rt/comm.h"
#include "rt/link_bytes.h"
#include "rt/netmoe_planner.h"
#include "rt/wait.h"

namespace moecomm::rt {

struct NetMoeStats {
  double solve_us = 0;  // the solver's own time, summed over layers
  double wait_us = 0;   // time collect() blocked: the part of the solve not hidden
  int solves = 0;
};

class NetMoeExchange final : public nn::SampleExchange {
 public:
  // ep: the EP group's communicator; options: timeout and ranks per node; layers, experts:
  // the model's (experts in equal blocks per member). activity (may be null) sees the row
  // A2As as pending, for Lina's and FSMoE's gradient scheduling.
  NetMoeExchange(const Comm& ep, CallOptions options, int layers, int experts,
                 A2AActivity* activity);

  int ranks() const override { return ep_.size(); }
  int rank() const override { return ep_.rank(); }
  nn::Tensor rows(const nn::Tensor& send, const std::vector<int>& send_rows,
                  std::vector<int>& recv_rows, const char* label, int meta_cols) override;
  std::vector<int> ints(const std::vector<int>& send, const std::vector<int>& send_counts,
                        const char* label, const std::vector<int>& recv_counts) override;
  std::vector<int> all_gather(const std::vector<int>& mine) override;
  void submit_placement(int layer, const std::vector<int>& samples,
                        const std::vector<int>& counts) override;
  std::vector<int> collect_placement(int layer) override;
  // Pipeline degrees (strategy chunks_fwd, chunks_bwd with pipeline_experts), each in
  // [1, sched::kMaxChunks]; 1 and 1 (the default): unchunked.
  void set_chunks(int forward, int backward);
  int chunks(bool backward) const override { return backward ? chunks_bwd_ : chunks_fwd_; }
  void pipeline(int chunks, const ChunkStage& send, const ChunkStage& work,
                const ChunkStage& recv) override;

  const LinkBytes& row_bytes() const { return rows_; }   // token rows this rank sent
  const LinkBytes& meta_bytes() const { return meta_; }  // metadata, counts and targets
  const NetMoeStats& stats() const { return stats_; }
  void reset_stats();
  // Forward rows this rank sent to each EP member so far: scatters (to the experts) and
  // gathers (to the samples' new ranks), for the simulator's NetMoE matrices; and how many
  // layers' scatters that was.
  const std::vector<int64_t>& scatter_rows() const { return scatter_rows_; }
  const std::vector<int64_t>& gather_rows() const { return gather_rows_; }
  int64_t scatters() const { return scatters_; }

 private:
  const Comm& ep_;
  CallOptions options_;
  A2AActivity* activity_;
  NetMoePlanner planner_;
  LinkBytes rows_, meta_;
  NetMoeStats stats_;
  std::vector<int64_t> scatter_rows_, gather_rows_;
  int64_t scatters_ = 0;
  int pending_layer_ = -1;
  int chunks_fwd_ = 1, chunks_bwd_ = 1;
  const std::atomic<bool>* stage_cancel_ = nullptr;  // the pipeline's, on its comm thread
  place::AsyncSamplePlacer placer_;                  // last: its thread stops first
};

}  // namespace moecomm::rt
