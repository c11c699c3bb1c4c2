#pragma once
// One training step as a schedule, for any Strategy (DESIGN.md "One schedule, three
// executors"): M micro-batches through the pipeline stages in the pp_schedule's order (each
// stage's blocks, forward and backward), the gradient synchronization once per step. Each
// knob's ops come from its own build_*.cpp.
//
// Streams: 0 compute; 1 token communication (A2A, TP AllReduce, pipeline-stage hand-off);
// 2 gradient synchronization; 3 copies and prefetch (MoNTA O3 D2D, HybridEP expert
// AllGather); 4 intra-node token collectives pipelined against the A2A (ESP AllGather /
// ReduceScatter / AllReduce, TP AllGather; MoNTA O2, FSMoE); 5 NetMoE's placement solve,
// beside the scatter and the experts (Alg. 1 lines 9-13); 6 the pipeline's sends, which run
// beside the next task's receive as Megatron's batched isend/irecv do (one stream for both
// would deadlock 1F1B: each stage would wait in its send for a receive the other posts
// later). The step names them
// (Schedule::stream_name) with kStreamNames, which traces and timelines show. Under
// overlap_microbatches the backwards run on a second lane of the same streams (7-13).
#include <array>
#include <string_view>
#include <vector>

#include "core/cluster.h"
#include "core/model_config.h"
#include "core/parallel_config.h"
#include "sched/schedule.h"
#include "sched/strategy.h"

namespace moecomm::sched {

inline constexpr int kComputeStream = 0;
inline constexpr int kTokenStream = 1;
inline constexpr int kGradStream = 2;
inline constexpr int kCopyStream = 3;
inline constexpr int kIntraStream = 4;
inline constexpr int kPlacementStream = 5;
inline constexpr int kStageSendStream = 6;
// By stream: what it carries, short enough for a timeline's row header.
inline constexpr std::array<std::string_view, 7> kStreamNames = {
    "compute",        "token comm",      "grad sync", "copy/prefetch",
    "intra-node comm", "placement solve", "pp send"};

struct LayerSetup {
  core::ModelConfig model;
  core::ParallelConfig parallel;
  core::Cluster cluster;
  Strategy strategy;
  // The model's transformer blocks, split over the pipeline's stages (and virtual stages) by
  // sched::split_layers: evenly, else the remainder on the first and last stages.
  int layers = 1;
  // Micro-batches per step (gradient accumulation; the pipeline's M), run in the order of the
  // strategy's pp_schedule (sched/pipeline_order.h); the gradients are synchronized once, in
  // the last micro-batch's backward.
  int micro_batches = 1;
  // Routed dispatch: per EP group (RankGroups::ep order), the n x n row-major dispatch byte
  // matrix [i * n + j]: member i -> member j, replicated TP dispatch, diagonal = bytes that
  // stay. Required for placement=netmoe (samples where NetMoE put them); when given with
  // placement=none it is the same routing with samples at home. Empty: uniform routing.
  std::vector<std::vector<double>> a2a_pair_bytes;
  // NetMoE's gather goes straight to the samples' NEW positions (Alg. 1 line 14): per EP
  // group, the combine byte matrix [i * n + j]: member i (the experts) -> member j (where the
  // samples go). The backward sends the gradients the reverse ways (its transposes). Empty:
  // the dispatch's transpose (samples return where they came from). Needs a2a_pair_bytes.
  std::vector<std::vector<double>> a2a_combine_pair_bytes;
  // Per layer, per rank: the dense gradient bytes AllReduced with that layer, in place of the
  // block's own (4h^2/tp + hE). A whole model's run groups more with them: `moecomm train`
  // AllReduces the LM head and final norm with the last block, the embeddings with the
  // first (`moecomm bench` replays those buckets). Empty: the block's own.
  std::vector<double> dense_grad_bytes;
  // A whole model's step: the LM head (final norm, vocab projection and loss) as compute ops
  // "head" on the last pipeline stage, between the forward and the backward, priced at
  // 2 t h V flops forward and 4 t h V backward (V = model.vocab_size). The runtime binds its
  // kernels there. false: the blocks alone, as the papers' per-layer figures are.
  bool lm_head = false;
};

// Throws moecomm::Error naming the field when the setup does not fit (world sizes differ,
// knobs that the parallel configuration cannot run, NetMoE matrices of the wrong shape).
Schedule build_training_step(const LayerSetup& setup);

// An upper bound of build_training_step(setup).num_ops(), counted before any op is built: the
// step is refused when it exceeds the ops that fit in memory.
double step_ops_bound(const LayerSetup& setup);

}  // namespace moecomm::sched
