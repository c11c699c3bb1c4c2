#pragma once
// MoNTA (Guo et al.) "Network-traffic-aware" performance model of one MoE AllToAll under
// tensor parallelism: the four methods of Table 6 (Baseline, O1, O2, O3), the optimal chunk
// count (Algorithms 1 and 2), strategy select (Algorithm 3) and the latency, throughput and
// MFU outputs of Fig. 10. Bytes, seconds, bytes/s, flop/s.
#include <cstdint>
#include <limits>
#include <optional>
#include <string_view>

#include "core/parallel_config.h"
#include "cost/efficiency_curve.h"

namespace moecomm::plan {

// A transfer resource: theoretical bandwidth B and efficiency r(bytes of one call) (Fig. 13).
struct Channel {
  double bandwidth_Bps = 0;
  cost::EfficiencyCurve efficiency;
};

// Inputs of Algorithms 1 and 2 (names as in the paper).
struct MontaInputs {
  std::int64_t b = 1;  // micro-batch size
  std::int64_t s = 1;  // sequence length; chunks split it, so N <= s
  std::int64_t h = 1;  // hidden size
  double bpe = 2;      // bytes per element (BPE)
  int t = 1;           // tensor-parallel degree: ranks of one node sharing the tokens
  int e = 1;           // expert-parallel degree: nodes in the AllToAll group
  Channel inter;       // B1, r1: inter-node AllToAll
  Channel intra;       // B2, r2: intra-node AllGather
  Channel memory;      // B3, r3: device memory (D2D copy)
  // Under O3 AllGather and D2D share load/store units, so r2 and r3 differ from O2's
  // (MoNTA "Performance model"); unset means the same as intra / memory.
  std::optional<Channel> intra_o3;
  std::optional<Channel> memory_o3;
  // I_minimal: smallest bytes per chunk worth sending. 1 MB by default: below that a
  // collective is start-up bound, and a tiny value lets Algorithms 1-2 try ~s chunks.
  double i_minimal = 1e6;
};

// Throws moecomm::Error naming the field if any input is out of range.
void validate(const MontaInputs& in);

// MoNTA Eq. 3: I = b s h BPE, bytes of one AllToAll per device.
double a2a_volume(const MontaInputs& in);

// Per-chunk times for N chunks, MoNTA Eq. 8-10 (o3 selects the O3 channels).
struct ChunkTimes {
  double aa = 0;   // AA_j, Eq. 8
  double ag = 0;   // AG_j, Eq. 9
  double d2d = 0;  // D2D_j, Eq. 10
};
ChunkTimes chunk_times(const MontaInputs& in, std::int64_t n, bool o3 = false);

double baseline_time(const MontaInputs& in);            // original AllToAll
double o1_time(const MontaInputs& in);                  // MoNTA Eq. 11
double o2_time(const MontaInputs& in, std::int64_t n);  // Algorithm 1 lines 13-17
double o3_time(const MontaInputs& in, std::int64_t n);  // Algorithm 2 lines 13-17

// Algorithms 1 and 2 try at most this many chunks: the paper's own optima are single
// digits, and the cap keeps the search short for any sequence length.
inline constexpr std::int64_t kMontaMaxChunks = 1 << 16;

// Largest N that Algorithms 1 and 2 try (lines 4-8, and N <= s); 0 if none.
std::int64_t max_chunks(const MontaInputs& in);

struct ChunkPlan {
  std::int64_t n = 0;  // 0: no chunk count allowed (I / t < I_minimal)
  double time_s = std::numeric_limits<double>::infinity();
};
ChunkPlan optimal_chunks_o2(const MontaInputs& in);  // Algorithm 1
ChunkPlan optimal_chunks_o3(const MontaInputs& in);  // Algorithm 2

// MoNTA's A2A methods (Table 6): plain A2A, O1 drop + AllGather, O2 chunked, O3 chunked with
// copies pipelined. Each is a setting of sched::Strategy's knobs (monta-o1..o3).
enum class MontaVariant { kBaseline, kO1, kO2, kO3 };
std::string_view variant_name(MontaVariant v);

struct MontaCosts {
  double baseline_s = 0;
  double o1_s = 0;
  ChunkPlan o2;
  ChunkPlan o3;
};
MontaCosts monta_costs(const MontaInputs& in);

struct MontaChoice {
  MontaVariant variant = MontaVariant::kBaseline;
  std::int64_t n = 1;  // chunk count (1 for Baseline and O1)
  double time_s = 0;   // one AllToAll under the variant
};
// Algorithm 3 (over Baseline too); ties go to the simpler variant.
MontaChoice select_variant(const MontaCosts& costs);
MontaChoice plan(const MontaInputs& in);  // monta_costs then select_variant

// A MoE layer's AllToAlls per training step: dispatch and combine forward, and their
// gradients backward (same volumes).
inline constexpr int kA2APerForward = 2;
inline constexpr int kA2APerBackward = 2;

// Model FLOPs of one MoE transformer layer for one micro-batch, forward and backward
// (3x forward), recomputation not counted. ffn_gemms: 2 (GeLU) or 3 (SwiGLU).
struct LayerFlopsInputs {
  std::int64_t b = 1, s = 1, h = 1, ffn_hidden = 1, experts = 1;
  int top_k = 1;
  int ffn_gemms = 2;
};
double moe_layer_training_flops(const LayerFlopsInputs& in);

// The "performance outputs" of MoNTA Fig. 10 for `layers` MoE layers run one after another
// on a group of `devices` devices.
struct PerformanceInputs {
  std::int64_t layers = 1;
  double layer_other_s = 0;  // per layer and step: all time except the MoE AllToAlls
  double a2a_s = 0;          // one AllToAll under the chosen variant (MontaChoice::time_s)
  double tokens = 0;         // tokens the group processes in that step
  double model_flops = 0;    // model FLOPs of that step for the group
  int devices = 1;
  double peak_flops = 0;  // per device, flop/s
};
struct Performance {
  double latency_s = 0;
  double tokens_per_s = 0;
  double mfu = 0;
};
Performance estimate_performance(const PerformanceInputs& in);

// MoNTA "Cluster Expansion": horizontal CP expansion while the sequence needs fewer CP ranks
// than an EP group holds (cp < ep), vertical from cp >= ep. The paper also asks horizontal
// for a switch network of ep x cp ports; every level of moecomm's cluster model is a full
// crossbar, so that holds here.
core::CpLayout monta_cp_layout(int cp, int ep);

}  // namespace moecomm::plan
