#pragma once
// The MoE token path of one layer: dispatch A2A, ESP collectives, experts, combine A2A, under
// the a2a, placement, tp_dispatch, chunks, pipeline_experts and copy_pipelining knobs.
#include <vector>

#include "sched/build_context.h"

namespace moecomm::sched {

// How tokens travel for this setup; throws moecomm::Error on parallel sizes the token path
// cannot run (esp must divide tp or tp = 1; drop-allgather needs tp = esp) and on NetMoE
// matrices of the wrong shape.
TokenPath make_token_path(const LayerSetup& setup, const core::RankGroups& groups,
                          const LayerWorkload& work,
                          const std::vector<std::vector<int>>& hybrid_orders = {});

// Uniform dispatch of `bytes` per rank over n members: every member sends bytes / n to each
// member, its own share staying (the diagonal).
std::vector<double> uniform_pairs(int n, double bytes);
std::vector<double> transposed(const std::vector<double>& pairs, int n);

// NetMoE with the LM head: every EP member all-gathers the group's targets (B S int32 each)
// at the forward's start, off the critical path, for the samples it will hold at the head.
// Per rank the op (kNone: none).
std::vector<OpId> build_targets_gather(BuildContext& ctx);

// The MoE part of the current layer and phase. Backward mirrors the forward with the
// gradients (the first A2A carries the combine's gradient in the dispatch direction) and
// twice the expert flops; it records the layer's expert gradients and FSMoE's window.
void build_moe(BuildContext& ctx);

}  // namespace moecomm::sched
