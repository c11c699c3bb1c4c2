#pragma once
// FSMoE (ASPLOS '25) Section 4: the analytical model of one MoE layer whose inter-node AlltoAll
// (dispatch and combine), intra-node ESP-AllGather / ESP-ReduceScatter and expert GEMMs run as a
// pipeline over r chunks, with a gradient AllReduce of length t_gar sharing the inter-node link
// (Fig. 3d, Fig. 4); and Algorithm 1, the pipeline degree r that minimises that time.
//
// The model is piecewise in r: conditions Q1-Q7 pick one of four cases, each with its own time
// formula (Eq. 2 and the three after it). Units are the caller's, used consistently: seconds and
// bytes (flops for the expert line) in moecomm, or the paper's Fig. 5 ms and elements.
#include "cost/alpha_beta.h"

namespace moecomm::plan {

// Largest degree searched when the caller gives none. The paper leaves r unbounded; a real
// layer cannot be split into more chunks than it has tokens, so callers should pass their own.
inline constexpr int kFsmoeDefaultMaxDegree = 64;

// FSMoE Eq. 1 inputs of one MoE layer in one phase. Sizes are of the whole (unchunked) layer
// input; each of the r chunks carries n / r.
struct FsmoeLayerModel {
  cost::AlphaBeta a2a;  // inter-node AlltoAll, one of dispatch / combine (same size)
  cost::AlphaBeta ag;   // intra-node ESP-AllGather
  cost::AlphaBeta rs;   // intra-node ESP-ReduceScatter
  cost::AlphaBeta exp;  // expert computation: alpha, beta = per-GEMM line times GEMM count
  double n_a2a = 0.0;   // bytes one AlltoAll moves
  double n_ag = 0.0;    // bytes of the AllGather (same convention as the fitted ag line)
  double n_rs = 0.0;    // bytes of the ReduceScatter (same convention as the fitted rs line)
  double n_exp = 0.0;   // expert workload (flops, or the unit the exp line was fitted in)
  double t_gar = 0.0;   // gradient AllReduce time placed in this layer: 0 forward (Sec. 4.4)
};

enum class FsmoeCase { k1 = 1, k2 = 2, k3 = 3, k4 = 4 };

// FSMoE Eq. 1: time of one chunk of each operation at degree r.
struct FsmoeChunkTimes {
  double a2a = 0.0;
  double ag = 0.0;
  double rs = 0.0;
  double exp = 0.0;
};

// FSMoE Sec. 4.2: the seven conditions, evaluated at one r.
struct FsmoeConditions {
  bool q1 = false, q2 = false, q3 = false, q4 = false, q5 = false, q6 = false, q7 = false;
};

// Throws moecomm::Error unless every coefficient and size is finite and >= 0.
void fsmoe_validate(const FsmoeLayerModel& m);

FsmoeChunkTimes fsmoe_chunk_times(const FsmoeLayerModel& m, int r);
FsmoeConditions fsmoe_conditions(const FsmoeLayerModel& m, int r);
// FSMoE Sec. 4.2 case table; every combination of Q1-Q7 selects exactly one case.
FsmoeCase fsmoe_select_case(const FsmoeConditions& q);
// The time formula of case c at degree r (Eq. 2 for Case1), whether or not c applies there.
double fsmoe_case_time(const FsmoeLayerModel& m, FsmoeCase c, int r);
// The case that applies at r.
FsmoeCase fsmoe_case_at(const FsmoeLayerModel& m, int r);
// MoE layer time at degree r: the formula of the case that applies.
double fsmoe_layer_time(const FsmoeLayerModel& m, int r);
// The same model at a real r >= 1 (the paper's continuous relaxation).
double fsmoe_layer_time_relaxed(const FsmoeLayerModel& m, double r);
// FSMoE Sec. 5.2 t_olp,moe(r): how long a gradient AllReduce can run inside the layer at degree
// r without making it slower (the model is evaluated with t_gar = 0).
double fsmoe_overlappable_time(const FsmoeLayerModel& m, int r);

// Exact optimum over the integers 1..max_degree (smallest r among ties).
struct FsmoeIntegerDegree {
  int r = 1;
  double time = 0.0;
  FsmoeCase which = FsmoeCase::k1;
};
FsmoeIntegerDegree fsmoe_optimal_integer_degree(const FsmoeLayerModel& m,
                                                int max_degree = kFsmoeDefaultMaxDegree);

// Algorithm 1 as published: each case minimised over real r in [1, max_degree] under its
// conditions by SLSQP, the best case kept. r_rounded is the better of floor(r) and ceil(r)
// under the true (integer) model, time_rounded its time.
struct FsmoeRelaxedDegree {
  double r = 1.0;
  double time = 0.0;
  FsmoeCase which = FsmoeCase::k1;
  int r_rounded = 1;
  double time_rounded = 0.0;
};
FsmoeRelaxedDegree fsmoe_relaxed_degree(const FsmoeLayerModel& m,
                                        int max_degree = kFsmoeDefaultMaxDegree);

struct FsmoeDegree {
  FsmoeIntegerDegree exact;
  FsmoeRelaxedDegree relaxed;
};
FsmoeDegree fsmoe_optimal_degree(const FsmoeLayerModel& m, int max_degree = kFsmoeDefaultMaxDegree);

// FSMoE Sec. 4.4: the forward phase has no gradient AllReduce (t_gar = 0).
FsmoeLayerModel fsmoe_forward_model(FsmoeLayerModel forward);
// FSMoE Sec. 4.4: the backward phase computes input and weight gradients, twice the forward
// expert work (alpha_exp and n_exp doubled), and carries t_gar from Sec. 5.
FsmoeLayerModel fsmoe_backward_model(const FsmoeLayerModel& forward, double t_gar);

struct FsmoePhaseDegrees {
  FsmoeDegree forward;
  FsmoeDegree backward;
};
// Degrees chosen separately per phase (Sec. 4.4) from the forward coefficients.
FsmoePhaseDegrees fsmoe_plan_phases(const FsmoeLayerModel& forward, double backward_t_gar,
                                    int max_degree = kFsmoeDefaultMaxDegree);

}  // namespace moecomm::plan
