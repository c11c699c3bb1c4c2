#pragma once
// The training loop of `moecomm train`: a small MoE transformer LM (nn) trained
// on every rank of MPI_COMM_WORLD with expert parallelism over EP groups of consecutive ranks
// and data parallelism for everything else. Per step the step's schedule runs op by op
// (scheduled_train.h): forward and backward (the MoE layers exchange tokens by A2A-v), dense
// gradients averaged over the world, expert gradients over the expert-data-parallel group,
// then one Adam step; the loss, the step time and the A2A bytes by link level are reported,
// and the routing can be recorded as a trace for `moecomm place`.
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/cluster.h"
#include "nn/moe_transformer.h"
#include "place/routing_trace.h"
#include "rt/call_trace.h"
#include "rt/executor.h"
#include "rt/link_bytes.h"
#include "sched/op.h"
#include "sched/schedule.h"
#include "sched/strategy.h"

namespace moecomm::rt {

struct TrainConfig {
  nn::MoeTransformerConfig model;  // model.moe.experts must be a multiple of ep
  int ep = 0;                      // EP group size; 0: the world / tp
  int tp = 1;  // TP = ESP group size (train_groups.h): replicated dense, sharded experts
  // Pipeline stages (the slowest rank dimension, Megatron-Core's order): stage s runs the
  // blocks sched::split_layers gives it, the embedding on the first, the head on the last.
  int pp = 1;
  // Micro-batches of `batch` sequences per step, run as the strategy's pp_schedule orders
  // them: their gradients are summed and scaled by 1 / micro_batches, so a step equals one
  // of micro_batches x batch sequences (with per-batch quantities such as the capacity and
  // the auxiliary loss taken per micro-batch); Adam steps once.
  int micro_batches = 1;
  // Every knob runs as its schedule's ops; placement=netmoe needs tp = 1 and dropless
  // token-choice layers (rt/netmoe_binding.h); expert_transfer=hybrid needs tp = 1 and no
  // placement (the token A2A reaches the peers at this rank's domain offset).
  sched::Strategy strategy;
  // HybridEP with hybrid_levels: the EP members' order (sched::hybrid_member_order on the
  // cluster; the same relative order in every EP group). Empty: consecutive domains.
  std::vector<int> hybrid_order;
  // The machine the ranks run on, when known (--cluster): the schedule runtime builds the
  // step's schedule on it (HybridEP's per-level domains need its levels).
  core::Cluster cluster;
  int batch = 4;  // sequences per rank per micro-batch
  int seq_len = 32;
  int steps = 200;
  float lr = 3e-3f;
  uint64_t data_seed = 1;
  std::vector<int> corpus;       // token ids to draw windows from; empty: synthetic Markov text
  int topics = 1;                // synthetic text: topic blocks (nn::SyntheticTextConfig)
  int text_order = 1;            // synthetic text: Markov order, 1 or 2
  int ranks_per_node = 0;        // node = rank / ranks_per_node for byte levels; 0: one node
  double timeout_s = 60;         // any collective that stalls longer fails the job
  bool record_routing = false;   // token-choice gates only
  bool keep_gradients = false;   // return the last step's reduced gradients (for tests)
  bool trace_last_step = false;  // return the last step's calls (TrainResult::last_step_calls)
  // Return the schedule and every step's op times (TrainResult::op_times).
  bool keep_op_times = false;
};

struct GradSyncStats {
  int64_t micro_ops = 0;   // AllReduces of gradients run
  int64_t bytes = 0;       // gradient bytes this rank AllReduced
  double allreduce_s = 0;  // time inside those AllReduces
  double overlap_s = 0;    // of which an A2A was running on this rank (lina: ~0)
  double held_s = 0;       // micro-ops held back by Lina's gate (sched/policy.h)
  int64_t votes = 0;       // lina: the gate's agreement votes
};

struct StepReport {
  int step = 0;
  // Mean over the pipelines (data-parallel ranks) and the step's micro-batches: with the
  // auxiliary loss of every stage's layers, and the cross-entropy only.
  float loss = 0;
  float lm_loss = 0;
  double step_ms = 0;  // slowest rank
  // All ranks, this step: the token path (A2As, and under TP the ESP/TP AllGather,
  // ReduceScatter, AllReduce; dispatch and combine, forward and backward), and the gradient
  // AllReduces.
  LinkBytes a2a;
  LinkBytes grad;
  LinkBytes tp_attention;  // Megatron's attention AllReduces over the TP groups (tp > 1)
  // HybridEP: the experts' AllGathers, their gradients' ReduceScatters and the shared
  // expert's AllReduces (rt/hybrid_codec.h).
  LinkBytes expert;
  GradSyncStats grad_sync;  // summed over ranks (seconds are rank-seconds)
  // placement=netmoe, all ranks, this step: the rows' metadata (scatter: token, first slot,
  // weight; gather: target row and chunk; scatter backward: the weight's gradient), the
  // layout's and per-sample counts and moved targets; a2a above holds the token rows only.
  LinkBytes a2a_meta;
  double placement_solve_ms = 0;  // slowest rank, summed over layers: solver time
  double placement_wait_ms = 0;   // slowest rank: the solve's time past the first expert chunk
  // Mean over ranks, this step: wall time with a token-path collective (A2A, ESP/TP
  // AllGather, ReduceScatter, AllReduce; NetMoE's scatter and gather) in flight on the
  // rank, in the forward and in the backward; and with a gradient AllReduce in flight.
  // Chunks in flight together count once, as the simulator's op union.
  double token_fwd_ms = 0, token_bwd_ms = 0, grad_sync_ms = 0;
  // Slowest rank: the forward's start to the gradients synced, the optimizer step left out
  // (what the simulator's step holds).
  double synced_ms = 0;
};

struct TrainResult {
  std::vector<StepReport> steps;
  double entropy_floor = 0;     // synthetic data: the best reachable cross-entropy (nats)
  place::RoutingTrace routing;  // on rank 0 when recorded: one iteration per step
  // With keep_gradients: this rank's parameters' gradients of the last step, after the
  // AllReduces and the scaling to the mean over ranks, by parameter name.
  std::vector<std::pair<std::string, nn::Tensor>> gradients;
  // With keep_gradients, on every rank, by global sample id (home rank * batch + b): the last
  // step's cross-entropy of each sample and the rank that held it at the LM head (its home
  // rank unless placement=netmoe moved it).
  std::vector<float> sample_losses;
  std::vector<int> sample_rank;
  // On every rank: the routing the simulator needs to replay these steps (sched::LayerSetup
  // a2a_pair_bytes, a2a_combine_pair_bytes), per EP group in core::RankGroups order, n x n
  // bytes member i -> member j of one layer's forward dispatch, the mean over steps and
  // layers (TP: the replicated dispatch, before MoNTA's drop). combine_bytes: NetMoE's
  // gathers to the samples' new ranks; empty otherwise (the dispatch's transpose).
  std::vector<std::vector<double>> dispatch_bytes, combine_bytes;
  // This rank's dense gradient bytes AllReduced per block (sched::LayerSetup::
  // dense_grad_bytes): the block's, plus the LM head and final norm with the last, the
  // embeddings with the first.
  std::vector<double> block_dense_grad_bytes;
  // With trace_last_step, on rank 0: every rank's ops of the last step (rt/call_trace.h:
  // thread = stream, label = the op's label).
  std::vector<CallEvent> last_step_calls;
  // With keep_op_times, on rank 0: the schedule every step ran and, per step, every rank's op
  // times (indexed by OpId; seconds from the step's common start).
  std::shared_ptr<const sched::Schedule> schedule;
  std::vector<std::vector<OpTime>> op_times;
};

// The config train() runs: ep and ranks_per_node filled in from the world, then checked as
// train() checks it. Every rank given the same config throws the same Error, before any
// collective: a command can report it once (cli::all_ranks_accept).
TrainConfig checked_train_config(const TrainConfig& config);

// Collective over MPI_COMM_WORLD, which MPI must have initialised with MPI_THREAD_MULTIPLE
// (each of the schedule's streams runs on a thread of its own). Throws Error on
// a configuration that does not fit the world; a stalled collective throws CommTimeout naming the
// op and rank. on_step runs on rank 0 after every step.
TrainResult train(const TrainConfig& config,
                  const std::function<void(const StepReport&)>& on_step = {});

}  // namespace moecomm::rt
