#include "plan/monta_planner.h"

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <string>
#include <utility>

#include "core/error.h"

namespace moecomm::plan {
namespace {

void require_positive(double v, const std::string& where) {
  if (!(v > 0) || !std::isfinite(v))
    throw Error(where, "must be a finite number > 0, got " + std::to_string(v));
}

void require_at_least_one(std::int64_t v, const std::string& where) {
  if (v < 1) throw Error(where, "must be at least 1, got " + std::to_string(v));
}

void validate_channel(const Channel& c, const std::string& where) {
  require_positive(c.bandwidth_Bps, where + ".bandwidth_Bps");
}

// Time to move `moved` bytes on channel c whose efficiency is looked up at the volume of
// the call, `call_bytes` (MoNTA Algorithm 1 line 9: r1 at I/(N t), r2 and r3 at I/N).
double transfer(const Channel& c, double call_bytes, double moved) {
  return moved / (c.bandwidth_Bps * c.efficiency.at(call_bytes));
}

// N chunks flow in order through stages that each serve one chunk at a time (one stream
// each, MoNTA Fig. 15); with identical chunks the last one leaves at
// sum(stages) + (N - 1) max(stages).
double pipeline_makespan(std::initializer_list<double> stages, std::int64_t n) {
  double sum = 0, slowest = 0;
  for (double d : stages) sum += d, slowest = std::max(slowest, d);
  return sum + double(n - 1) * slowest;
}

ChunkTimes chunk_times_unchecked(const MontaInputs& in, std::int64_t n, bool o3) {
  const double i = a2a_volume(in);
  const double i_aa = i / (double(n) * in.t);
  const double i_ag = i / double(n);
  const Channel& intra = o3 && in.intra_o3 ? *in.intra_o3 : in.intra;
  const Channel& memory = o3 && in.memory_o3 ? *in.memory_o3 : in.memory;
  return {transfer(in.inter, i_aa, i_aa * (in.e - 1) / in.e),  // MoNTA Eq. 8
          transfer(intra, i_ag, i_ag * (in.t - 1) / in.t),     // MoNTA Eq. 9
          transfer(memory, i_ag, i_ag)};                       // MoNTA Eq. 10
}

// MoNTA Algorithm 1 lines 13-17: AllToAll on one stream, AllGather then D2D copy of a
// chunk on the other: T = AA_j + (AG_j + D2D_j) N if AA_j < AG_j + D2D_j, else
// AA_j N + AG_j + D2D_j - the two-stage makespan.
double o2_unchecked(const MontaInputs& in, std::int64_t n) {
  const ChunkTimes c = chunk_times_unchecked(in, n, false);
  return pipeline_makespan({c.aa, c.ag + c.d2d}, n);
}

// MoNTA Algorithm 2 lines 13-17 write T = AA_j + AG_j N + D2D_j if AA_j < AG_j, else
// AA_j N + AG_j + D2D_j: the three-stage makespan when D2D_j <= max(AA_j, AG_j), which the
// paper assumes (memory bandwidth far above link bandwidth). We use the makespan itself so
// that a slow copy stage is not ignored when the assumption fails.
double o3_unchecked(const MontaInputs& in, std::int64_t n) {
  const ChunkTimes c = chunk_times_unchecked(in, n, true);
  return pipeline_makespan({c.aa, c.ag, c.d2d}, n);
}

// MoNTA Algorithm 1 lines 5-8: stop once a chunk is below I_minimal; and a chunk holds at
// least one token of the sequence (Eq. 4 splits s into N parts).
bool chunk_allowed(const MontaInputs& in, std::int64_t n) {
  const double i = a2a_volume(in);
  const double i_aa = i / (double(n) * in.t), i_ag = i / double(n);
  return n <= in.s && n <= kMontaMaxChunks && !(i_aa < in.i_minimal) && !(i_ag < in.i_minimal);
}

// MoNTA Algorithms 1 and 2 (they differ only in the per-N cost). Lines 18-20 of both read
// "if T < T_min then T = T_min", which never records anything (extraction/typo); the
// intended update is T_min = T together with the N that achieved it, returned at line 22.
ChunkPlan optimal_chunks(const MontaInputs& in, bool o3) {
  validate(in);
  ChunkPlan best;  // line 2: T_min = +inf
  for (std::int64_t n = 1; chunk_allowed(in, n); ++n) {
    const double t = o3 ? o3_unchecked(in, n) : o2_unchecked(in, n);
    if (t < best.time_s) best = {n, t};
  }
  return best;
}

}  // namespace

void validate(const MontaInputs& in) {
  require_at_least_one(in.b, "MontaInputs.b");
  require_at_least_one(in.s, "MontaInputs.s");
  require_at_least_one(in.h, "MontaInputs.h");
  require_positive(in.bpe, "MontaInputs.bpe");
  require_at_least_one(in.t, "MontaInputs.t");
  require_at_least_one(in.e, "MontaInputs.e");
  validate_channel(in.inter, "MontaInputs.inter");
  validate_channel(in.intra, "MontaInputs.intra");
  validate_channel(in.memory, "MontaInputs.memory");
  if (in.intra_o3) validate_channel(*in.intra_o3, "MontaInputs.intra_o3");
  if (in.memory_o3) validate_channel(*in.memory_o3, "MontaInputs.memory_o3");
  require_positive(in.i_minimal, "MontaInputs.i_minimal");
}

// MoNTA Eq. 3.
double a2a_volume(const MontaInputs& in) {
  return double(in.b) * double(in.s) * double(in.h) * in.bpe;
}

ChunkTimes chunk_times(const MontaInputs& in, std::int64_t n, bool o3) {
  validate(in);
  require_at_least_one(n, "chunk count N");
  return chunk_times_unchecked(in, n, o3);
}

// Every rank of a TP group sends its full copy of the tokens; (e-1)/e of them leave the
// node, on the inter-node link at the efficiency of an I-byte call (MoNTA Table 8 row 1;
// Eq. 8 with N = t = 1; the T_base of Eq. 13).
double baseline_time(const MontaInputs& in) {
  validate(in);
  const double i = a2a_volume(in);
  return transfer(in.inter, i, i * (in.e - 1) / in.e);
}

// MoNTA Eq. 11: Drop + AllToAll of I/t + AllGather of I, one after the other (Eq. 8 + Eq. 9
// with N = 1).
double o1_time(const MontaInputs& in) {
  validate(in);
  const ChunkTimes c = chunk_times_unchecked(in, 1, false);
  return c.aa + c.ag;
}

double o2_time(const MontaInputs& in, std::int64_t n) {
  validate(in);
  require_at_least_one(n, "chunk count N");
  return o2_unchecked(in, n);
}

double o3_time(const MontaInputs& in, std::int64_t n) {
  validate(in);
  require_at_least_one(n, "chunk count N");
  return o3_unchecked(in, n);
}

std::int64_t max_chunks(const MontaInputs& in) {
  validate(in);
  std::int64_t n = 0;
  while (chunk_allowed(in, n + 1)) ++n;
  return n;
}

ChunkPlan optimal_chunks_o2(const MontaInputs& in) {
  return optimal_chunks(in, false);
}
ChunkPlan optimal_chunks_o3(const MontaInputs& in) {
  return optimal_chunks(in, true);
}

std::string_view variant_name(MontaVariant v) {
  switch (v) {
    case MontaVariant::kBaseline:
      return "baseline";
    case MontaVariant::kO1:
      return "O1";
    case MontaVariant::kO2:
      return "O2";
    case MontaVariant::kO3:
      return "O3";
  }
  return "?";
}

MontaCosts monta_costs(const MontaInputs& in) {
  return {baseline_time(in), o1_time(in), optimal_chunks_o2(in), optimal_chunks_o3(in)};
}

// MoNTA Algorithm 3: the variant of minimum cost. The paper lists T_O1..T_O3; the baseline
// is a candidate too (O1 loses to it when the intra-node link is slow). Candidates are in
// order of complexity and only a strictly smaller cost replaces the current choice.
MontaChoice select_variant(const MontaCosts& costs) {
  MontaChoice best{MontaVariant::kBaseline, 1, costs.baseline_s};
  const MontaChoice others[] = {{MontaVariant::kO1, 1, costs.o1_s},
                                {MontaVariant::kO2, costs.o2.n, costs.o2.time_s},
                                {MontaVariant::kO3, costs.o3.n, costs.o3.time_s}};
  for (const MontaChoice& c : others)
    if (c.time_s < best.time_s) best = c;
  return best;
}

MontaChoice plan(const MontaInputs& in) {
  return select_variant(monta_costs(in));
}

// Forward FLOPs: attention projections 2 b s (4 h^2), scores and context 2 (2 b s^2 h), gate
// 2 b s h E, and top_k experts of ffn_gemms GEMMs each 2 b s h f; backward is twice the
// forward (Narayanan et al. 2021), so training is 3x.
double moe_layer_training_flops(const LayerFlopsInputs& in) {
  for (auto [v, name] : {std::pair{in.b, "b"},
                         {in.s, "s"},
                         {in.h, "h"},
                         {in.ffn_hidden, "ffn_hidden"},
                         {in.experts, "experts"},
                         {std::int64_t{in.top_k}, "top_k"},
                         {std::int64_t{in.ffn_gemms}, "ffn_gemms"}})
    require_at_least_one(v, std::string("LayerFlopsInputs.") + name);
  const double bs = double(in.b) * in.s, h = double(in.h);
  const double attention = 2 * bs * 4 * h * h + 4 * bs * in.s * h;
  const double gate = 2 * bs * h * in.experts;
  const double experts = in.top_k * in.ffn_gemms * 2 * bs * h * in.ffn_hidden;
  return 3 * (attention + gate + experts);
}

// MoNTA Fig. 10 outputs: latency = layers x (other time + the 4 AllToAlls of the chosen
// strategy); throughput = tokens / latency; MFU = model FLOPs / (latency x devices x peak)
// (model FLOPs utilization as defined by Chowdhery et al. 2022, PaLM).
Performance estimate_performance(const PerformanceInputs& in) {
  require_at_least_one(in.layers, "PerformanceInputs.layers");
  require_at_least_one(in.devices, "PerformanceInputs.devices");
  require_positive(in.peak_flops, "PerformanceInputs.peak_flops");
  for (auto [v, name] : {std::pair{in.layer_other_s, "layer_other_s"},
                         {in.a2a_s, "a2a_s"},
                         {in.tokens, "tokens"},
                         {in.model_flops, "model_flops"}})
    if (!(v >= 0) || !std::isfinite(v))
      throw Error(std::string("PerformanceInputs.") + name, "must be a finite number >= 0");
  const double per_layer = in.layer_other_s + (kA2APerForward + kA2APerBackward) * in.a2a_s;
  const double latency = double(in.layers) * per_layer;
  require_positive(latency, "PerformanceInputs (layer_other_s + a2a_s)");
  return {latency, in.tokens / latency, in.model_flops / (latency * in.devices * in.peak_flops)};
}

core::CpLayout monta_cp_layout(int cp, int ep) {
  return cp < ep ? core::CpLayout::kHorizontal : core::CpLayout::kVertical;
}

}  // namespace moecomm::plan
