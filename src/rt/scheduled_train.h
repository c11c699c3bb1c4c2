#pragma once
// `moecomm train`: each step runs the schedule that sched::build_training_step emits for
// the strategy and the parallel layout (the one the simulator runs), op by op on rt::Executor,
// with the model's kernels and buffers bound by rt::ModelBinding: no per-knob code. It runs
// a2a (flat / 1dh / 2dh), chunks_fwd / chunks_bwd with or without pipeline_experts,
// copy_pipelining, grad_sync (bucketed / lina / fsmoe) with grad_partitions, under tp > 1 both
// tp_dispatch values, expert_transfer=hybrid, placement=netmoe (rt/netmoe_binding.h) and
// recompute_experts (the MoE layers recompute their experts' forward in the backward).
// With keep_op_times the result holds the schedule and every step's op times; with
// trace_last_step, the last step's ops as calls.
#include <functional>

#include "core/model_config.h"
#include "rt/train_loop.h"
#include "sched/layer_builder.h"

namespace moecomm::rt {

// The model as the schedule builders (and the planner) describe it: sizes, dtype, layout.
core::ModelConfig schedule_model(const TrainConfig& config);

// Throws moecomm::Error naming the knob or flag that cannot run as asked.
void check_scheduled(const TrainConfig& config);

// train() after its checks and defaults.
TrainResult train_scheduled(const TrainConfig& config,
                            const std::function<void(const StepReport&)>& on_step);

}  // namespace moecomm::rt
