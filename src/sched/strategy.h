#pragma once
// A Strategy: one value per knob of DESIGN.md "The one idea: techniques are knobs of one
// schedule". The papers' methods are named settings (named_strategy); knobs compose, and
// build_training_step (layer_builder.h) turns any combination into one schedule.
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "sched/op.h"
#include "sched/wire_dtype.h"

namespace moecomm::sched {

enum class Placement { kNone, kNetMoe };               // NetMoE dynamic sample placement
enum class TpDispatch { kReplicate, kDropAllGather };  // DeepSpeed baseline | MoNTA O1 / TED
enum class GradSync { kBucketed, kLina, kFsmoe };      // gradient AllReduce scheduling
enum class ExpertTransfer { kNone, kHybrid };          // HybridEP expert domains
enum class CommPriority { kNone, kMonta };             // MoNTA: EP > PP > CP > DP on links
// The order a pipeline stage runs its micro-batches' forwards and backwards in
// (sched/pipeline_order.h): GPipe (all forwards, then all backwards), 1F1B (PipeDream-Flush,
// Megatron's default), interleaved 1F1B over virtual stages (Megatron's
// --num-layers-per-virtual-pipeline-stage).
enum class PpSchedule { kGpipe, k1F1B, kInterleaved };

// Upper bounds of the integer knobs (a typo must not build millions of ops per rank).
inline constexpr int kMaxChunks = 1024;
inline constexpr int kMaxGradPartitions = 1 << 16;
inline constexpr int kMaxVirtualStages = 64;

struct Strategy {
  std::string name = "baseline";
  Placement placement = Placement::kNone;
  Algorithm a2a = Algorithm::kFlat;  // an A2A algorithm (sched/a2a_routing.h): its routing
  // The dtype the token rows travel as, per direction (sched/wire_dtype.h), in the dispatch
  // and combine A2As and the ESP / TP AllGathers that extend them (the ESP ReduceScatter and
  // AllReduce sum partial outputs and keep the model's dtype). fp8 carries one fp32 scale per
  // 128 values of a row (DeepEP). Written a2a_dtype=bf16 (both ways) or a2a_dtype=fp8/bf16
  // (dispatch/combine: DeepSeek-V3's FP8 dispatch and BF16 combine). nullopt: the model's
  // dtype both ways, and the knob is left out of to_string.
  std::optional<A2ADtype> a2a_dtype;
  TpDispatch tp_dispatch = TpDispatch::kReplicate;
  int chunks_fwd = 1;  // pipeline degree of the MoE token path (MoNTA O2's N, FSMoE's r)
  int chunks_bwd = 1;
  // true: every chunk flows A2A -> (ESP AG) -> experts -> (ESP RS) -> A2A on its own (FSMoE
  // Fig. 3d, Lina's A2A/FFN micro-ops); false: only the communication is chunked and the
  // experts wait for all chunks (MoNTA Fig. 15).
  bool pipeline_experts = true;
  // MoNTA O3: each chunk's reordering D2D copy runs on the copy stream, beside the next
  // chunk's AllGather (Algorithm 2) instead of after it on the AllGather's stream (Algorithm 1).
  bool copy_pipelining = false;
  GradSync grad_sync = GradSync::kBucketed;
  int grad_partitions = 1;  // micro-ops per layer gradient tensor (lina, fsmoe)
  ExpertTransfer expert_transfer = ExpertTransfer::kNone;
  int hybrid_domain = 2;  // HybridEP S_ED: consecutive EP ranks that exchange experts
  // HybridEP's domain size per level the EP group spans, outermost first ("2x1"): domains are
  // sub-grids, placed by location renumbering (build_hybridep.h); hybrid_domain is then their
  // product. Empty: blocks of hybrid_domain consecutive EP ranks.
  std::vector<int> hybrid_levels;
  double compression = 1.0;  // HybridEP SR: bytes of the expert AllGather per parameter byte
  // HybridEP SR with compression < 1: residuals against the shared expert (the average of the
  // layer's experts, AllReduced in every backward), or against zero ("w/o S", Fig. 14).
  bool shared_expert = true;
  // HybridEP SR with compression < 1: error feedback (ours, not the paper's): copy holders keep
  // the residual received so far and each step sends the top-k of what is still missing, so
  // copies converge to their owners' experts at the same bytes per step.
  bool sr_feedback = false;
  // MoNTA "Communication priority": where EP, PP, CP and DP transfers share links, the
  // network serves them in that order (none: they share fairly, Lina's A2A-first aside).
  CommPriority comm_priority = CommPriority::kNone;
  // Activation recomputation of the experts (a memory knob): the forward keeps only each
  // expert's input rows and the backward runs the expert FFN forward again before its
  // gradients, so a backward expert op costs 3x the forward's flops instead of 2x
  // (Korthikanti et al. 2022's selective recomputation, applied to the expert MLPs).
  bool recompute_experts = false;
  // The pipeline schedule of a step's micro-batches; virtual_stages is interleaved's V (model
  // chunks per stage, 1 otherwise). Written pp_schedule=interleaved:V.
  PpSchedule pp_schedule = PpSchedule::k1F1B;
  int virtual_stages = 1;
  // One micro-batch's token A2As beside another micro-batch's compute in the pipeline's steady
  // state (Megatron-Core's --overlap-moe-expert-parallel-comm in 1F1B, DeepSeek-V3's DualPipe).
  bool overlap_microbatches = false;
  // ZeRO stage of the data-parallel optimizer (Rajbhandari et al. 2020): 1 shards the Adam
  // states, 2 also the gradients (ReduceScatter instead of AllReduce), 3 also the parameters
  // (AllGathered before each use). 0: every rank keeps everything.
  int zero = 0;

  bool operator==(const Strategy&) const = default;
};

// HybridEP SR's bytes per parameter byte as the schedule pays them: 1 when no expert travels
// (hybrid expert transfer off, or a domain of one member), since nothing is sent to compress
// and no shared expert is needed to decode it.
double effective_compression(const Strategy& strategy);

// The paper methods: baseline, hier-a2a, monta-o1, monta-o2, monta-o3, fsmoe, lina, hybridep,
// netmoe. Throws moecomm::Error listing them on an unknown name.
Strategy named_strategy(const std::string& name);
std::vector<std::string> strategy_names();

// Either a name from strategy_names() or "knob=value,..." whose first item may be
// "base=NAME" (defaults otherwise: baseline). Knobs: name, placement, a2a, a2a_dtype, tp_dispatch,
// chunks (both phases), chunks_fwd, chunks_bwd, pipeline_experts, copy_pipelining,
// grad_sync, grad_partitions, expert_transfer, hybrid_domain, hybrid_levels, compression,
// shared_expert, sr_feedback, comm_priority, recompute_experts, pp_schedule,
// overlap_microbatches, zero. `where`
// names the source (e.g. "--strategy"); errors name the knob and list what is accepted, with
// the near-miss name ("did you mean 'chunks'?"). A knob given twice (chunks counts as
// chunks_fwd and chunks_bwd) and an empty item are refused.
Strategy parse_strategy(const std::string& text, const std::string& where);

// parse_strategy's result with what the text said: the planner fills only the knobs the user
// left to it (DESIGN.md: "Planners choose knob values from the papers' analytical models").
struct ParsedStrategy {
  Strategy strategy;
  // The paper method the knobs start from: the plain name or the base=NAME value; empty for
  // bare knobs (no method, nothing for a planner to tune).
  std::string method;
  // Knobs the text set, by their to_string names ("chunks" sets chunks_fwd and chunks_bwd);
  // a plain name sets none. Includes "name" when set.
  std::set<std::string> explicit_knobs;
  bool is_explicit(const std::string& knob) const { return explicit_knobs.count(knob) > 0; }
};
ParsedStrategy parse_strategy_knobs(const std::string& text, const std::string& where);
// The A2A algorithms the a2a knob accepts (sched/a2a_routing.h), and one by name (throws
// moecomm::Error naming `where` and listing them on an unknown one).
std::vector<std::string> a2a_algorithm_names();
// Those whose plans move whole (source, destination) blocks (A2AAlgorithmInfo::moves_blocks),
// which the executors' generic routed A2A runs: every one but dedup, whose rows they move by
// token (rt/dedup_a2a.h, moecomm.torch's collectives).
std::vector<std::string> routed_a2a_algorithm_names();
Algorithm parse_a2a_algorithm(const std::string& name, const std::string& where);
// Knob combinations that mean nothing: throws moecomm::Error naming `where` and the knob.
void validate(const Strategy& strategy, const std::string& where);
// "name=...,placement=...,...": every knob, parse_strategy's syntax (round-trips);
// hybrid_levels and a2a_dtype only when set.
std::string to_string(const Strategy& strategy);

std::string_view to_string(Placement placement);
std::string_view to_string(TpDispatch dispatch);
std::string_view to_string(GradSync sync);
std::string_view to_string(ExpertTransfer transfer);
std::string_view to_string(CommPriority priority);
// "gpipe", "1f1b", "interleaved:V": the pp_schedule knob's value.
std::string pp_schedule_name(const Strategy& strategy);
std::vector<std::string> pp_schedule_names();  // as accepted, interleaved as "interleaved:V"
// Sets pp_schedule and virtual_stages from a pp_schedule value; throws naming `where`.
void parse_pp_schedule(Strategy& strategy, const std::string& value, const std::string& where);

}  // namespace moecomm::sched
