#pragma once
// HybridEP's stream-based model (HybridEP Sec. III, Eq. 1-12): which proportion p of a
// worker's outgoing token chunks stays A2A while the rest turns into an AllGather of experts
// inside an expert domain, and the latency of one MoE block that results. Then its use on a
// multilevel cluster (Sec. IV-A): one expert domain size per level. Units: bytes, seconds,
// bytes/s. Compute times come from cost::GemmModel (HybridEP Eq. 1). Like the paper, the
// model has no per-message latency; only bandwidth.
#include <vector>

namespace moecomm::plan {

// Computation of one MoE block on one GPU (HybridEP Eq. 2).
struct HybridEpCompute {
  double pre_expert_seconds = 0.0;  // Lat_comp^PE: (m+1) attention + m FFN before the experts
  double expert_seconds = 0.0;      // Lat_comp^Ep: one expert on its tokens
  int experts_per_gpu = 1;          // n
};

// HybridEP's single-level model, notation of its Table I ("one GPU per DC").
struct HybridEpStreamInput {
  int gpus = 0;               // G (>= 2): workers exchanging tokens
  double bandwidth = 0.0;     // B: bytes/s between two workers
  double data_bytes = 0.0;    // D: tokens one worker dispatches in one A2A
  double expert_bytes = 0.0;  // P_E: one worker's experts as AllGather sends them
  HybridEpCompute compute;
};

// The terms of HybridEP Eq. 2-8 at one proportion p.
struct HybridEpStreamTimes {
  double compute_seconds = 0.0;    // Eq. 2
  double a2a_seconds = 0.0;        // Eq. 3, one A2A
  double allgather_seconds = 0.0;  // Eq. 4
  double comm_seconds = 0.0;       // Eq. 5: AG + 2 A2A
  double overlap_seconds = 0.0;    // Eq. 7
  double total_seconds = 0.0;      // Eq. 8: compute + comm - overlap
};

// p in [0, 1] (Definition 1 allows k / (G - 1); any real p is evaluated). Throws
// moecomm::Error on invalid input.
HybridEpStreamTimes hybridep_stream_times(const HybridEpStreamInput& in, double p);

// Regions of HybridEP Eq. 10: Case 1 while the AllGather hides under the pre-expert compute,
// otherwise Case 2.1 (2D - G P_E < 0: latency falls as p grows) or 2.2 (2D - G P_E >= 0).
enum class HybridEpCase { kCase1, kCase2_1, kCase2_2 };

// The Case 2 sub-case of a configuration, the label HybridEP's Summary and Table IV use.
HybridEpCase hybridep_case2_kind(const HybridEpStreamInput& in);
// The region of Eq. 10 that p lies in.
HybridEpCase hybridep_case_at(const HybridEpStreamInput& in, double p);
// Eq. 11/12 boundary: p_b = 1 - B Lat_PE / (P_E (G - 1)); Case 1 is p >= p_b. May be < 0.
double hybridep_case_boundary(const HybridEpStreamInput& in);

struct HybridEpOptimum {
  double p = 0.0;
  HybridEpCase kind = HybridEpCase::kCase2_2;  // Case 2.1 or 2.2, as the paper labels it
  HybridEpCase region = HybridEpCase::kCase1;  // region the optimum lies in
  double total_seconds = 0.0;                  // Eq. 8 at p
};
// Continuous optimum of Eq. 8 (HybridEP Sec. III-E Summary). Case 1 wants the smallest p of
// its region (Eq. 11), Case 2.1 the largest (Eq. 12), Case 2.2 p = 0. So: Case 2.1 -> p_b
// (clamped to [0, 1]); Case 2.2 -> 0.
HybridEpOptimum hybridep_optimal_p(const HybridEpStreamInput& in);

// Definition 1's p for expert domain size S (S divides G): of the G - 1 chunks leaving a
// worker, the G - S bound for other domains stay A2A: p = (G - S) / (G - 1).
double hybridep_p_of_domain(int gpus, int domain_size);
// Share of a worker's D that leaves by A2A, (G - S) / G. HybridEP's Table IV reports this as
// its p column (S = 2, 4, 8 of G = 8 -> 0.75, 0.5, 0), not Definition 1's p.
double hybridep_a2a_share(int gpus, int domain_size);

struct HybridEpDomainChoice {
  int domain_size = 1;
  double p = 1.0;  // Definition 1
  double total_seconds = 0.0;
};
// The realizable optimum: domains have equal size (Sec. IV-A), so S ranges over the divisors
// of G; the one with the least Eq. 8 latency at p = hybridep_p_of_domain(G, S) wins, ties to
// the larger domain (Sec. IV-B: larger domains are preferred).
HybridEpDomainChoice hybridep_best_domain(const HybridEpStreamInput& in);

// ---- Multilevel (HybridEP Sec. IV-A) ----

struct HybridEpLevel {
  int count = 0;           // SF^l (>= 1): workers of this level in one worker of the level above
  double bandwidth = 0.0;  // bytes/s between two workers of this level
};

struct HybridEpLayerInput {
  std::vector<HybridEpLevel> levels;  // outermost first
  double data_bytes = 0.0;            // D: tokens one GPU dispatches in one A2A
  double expert_bytes = 0.0;          // P_E: one GPU's experts as AllGather sends them
  HybridEpCompute compute;
};

struct HybridEpLayerTimes {
  std::vector<double> p;                        // per level, Definition 1 (1 for count 1)
  std::vector<double> a2a_level_seconds;        // per level, one A2A
  std::vector<double> allgather_level_seconds;  // per level
  double compute_seconds = 0.0;
  double a2a_seconds = 0.0;  // one A2A, all levels
  double allgather_seconds = 0.0;
  double overlap_seconds = 0.0;
  double total_seconds = 0.0;
};

// Our multilevel reading of Eq. 2-8 (the paper gives the model for one level only and the
// per-level topology by Algorithm 1). With domain size S^l at level l (count SF^l, link B^l):
//  - A2A is hierarchical, one level after the other, each moving a GPU's D among the SF^l
//    workers of its group: A2A^l = D (SF^l - S^l) / (SF^l B^l) (Eq. 3 with G = SF^l).
//  - AllGather runs outermost level first and forwards what outer levels delivered, so a GPU
//    ends up with the experts of its domains at every level: AG^l = P_E prod_{j<l} S^j
//    (S^l - 1) / B^l (Eq. 4). Levels run one after the other: AG = sum_l AG^l.
//  - Eq. 5, 7, 8 unchanged with A2A = sum_l A2A^l and AG as above.
// With one level this is exactly Eq. 8 at p = hybridep_p_of_domain(G, S).
HybridEpLayerTimes hybridep_layer_times(const HybridEpLayerInput& in,
                                        const std::vector<int>& domain_sizes);

struct HybridEpPlan {
  std::vector<int> domain_sizes;  // S_ED^l per level, outermost first
  HybridEpLayerTimes forward;
};
// Domain sizes minimizing hybridep_layer_times (the forward, Eq. 8's objective) over every
// combination of per-level divisors; ties to larger outer domains.
HybridEpPlan hybridep_plan(const HybridEpLayerInput& in);

// Backward of the same MoE layer. Our extension: the paper models the forward only. The
// backward mirrors it: two A2As of D (gradients of the dispatched and combined tokens); the
// gradient of every gathered expert copy returns to its owner by a ReduceScatter over the
// AllGather's pairs (same per-level volumes with payload expert_grad_bytes, uncompressed
// since the paper compresses weights, not gradients); it overlaps the pre-expert backward
// that follows the experts in the backward pass, as the AllGather overlaps the pre-expert
// forward (Eq. 7), and the expert backward overlaps communication as in Eq. 7.
struct HybridEpBackwardInput {
  double expert_grad_bytes = 0.0;  // gradients of one GPU's experts
  HybridEpCompute compute;         // backward compute times (typically 2x the forward)
};
HybridEpLayerTimes hybridep_backward_times(const HybridEpLayerInput& forward,
                                           const HybridEpBackwardInput& backward,
                                           const std::vector<int>& domain_sizes);

}  // namespace moecomm::plan
