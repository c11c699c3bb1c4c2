#pragma once
// The pipeline's part of a training step (DESIGN.md "One schedule, three executors"): which
// layers each pipeline stage holds, and in which order a stage runs its micro-batches'
// forwards and backwards under the pp_schedule knob. The layer builder emits each task's ops
// in this order, so the simulator and the runtimes run one and the same pipeline.
#include <string>
#include <vector>

#include "sched/op.h"
#include "sched/strategy.h"

namespace moecomm::sched {

// One forward or backward of one micro-batch through one model chunk of a stage (the chunk
// is the stage's virtual stage under interleaved:V, else 0).
struct PipelineTask {
  Phase phase = Phase::kForward;
  int micro_batch = 0;
  int chunk = 0;
  bool operator==(const PipelineTask&) const = default;
};

// `layers` blocks over `parts` consecutive parts (pipeline stages, or virtual stages under
// interleaved:V, in model order). Even when `parts` divides them; otherwise the middle parts
// take ceil(layers / parts) and the first and last share the rest (the last one more), as
// Megatron-Core's --decoder-first/last-pipeline-num-layers let a user place it: those parts
// also hold the embedding and the LM head. Throws moecomm::Error naming `where` when a part
// would be left without a layer.
std::vector<int> split_layers(int layers, int parts, const std::string& where);

// The first layer of each part of split_layers, and `layers` at the end (parts + 1 entries).
std::vector<int> layer_offsets(const std::vector<int>& split);

// Stage `stage`'s tasks in the order it runs them, for M micro-batches on `stages` stages:
//   gpipe        every forward, then every backward (Huang et al. 2019);
//   1f1b         min(stages - stage - 1, M) forwards to warm up, then one forward and one
//                backward in turn, then the remaining backwards (PipeDream-Flush, Megatron's
//                default);
//   interleaved  1F1B over the stage's V model chunks, micro-batches in groups of `stages`
//                (Narayanan et al. 2021, Megatron-Core's interleaved schedule); needs M a
//                multiple of `stages`.
// Every (phase, micro-batch, chunk) appears once. Throws moecomm::Error naming `where`.
std::vector<PipelineTask> pipeline_order(const Strategy& strategy, int stages, int stage,
                                         int micro_batches, const std::string& where);

// The p2p tag of a micro-batch's hand-off across the boundary between virtual stages
// `boundary` and boundary + 1 (of `virtual_stages`), by phase: unique within a step, so a
// send meets its receive whatever order the stages run their tasks in.
inline int stage_tag(Phase phase, int micro_batch, int boundary, int virtual_stages) {
  const int m = micro_batch < 0 ? 0 : micro_batch;
  return (m * virtual_stages + boundary) * 2 + (phase == Phase::kBackward ? 1 : 0);
}

// The model chunk `chunk` of stage `stage` is virtual stage chunk * stages + stage.
inline int virtual_stage(int stage, int chunk, int stages) { return chunk * stages + stage; }

}  // namespace moecomm::sched
