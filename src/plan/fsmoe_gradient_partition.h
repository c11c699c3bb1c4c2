#pragma once
// FSMoE (ASPLOS '25) Section 5: adaptive gradient partitioning. The gradient AllReduce of the
// data-parallel group is split into the windows of the backward pass where the inter-node link
// is idle (step 1, Eq. 3-4); what does not fit is spread over the MoE layers, each of which
// re-chooses its pipeline degree for the AllReduce time it is given (step 2, Eq. 5).
//
// Layers are indexed in backward execution order: layer 0 is the first to run backward (the
// model's last MoE layer). A "generalized layer" is an MoE layer plus the dense operations
// up to the next MoE layer (Sec. 5.2).
#include <cstddef>
#include <vector>

#include "cost/alpha_beta.h"
#include "plan/fsmoe_pipeline.h"

namespace moecomm::plan {

struct FsmoeGradLayer {
  FsmoeLayerModel backward;  // this MoE layer's backward coefficients; t_gar is set here
  double t_olp_dense = 0.0;  // time of this generalized layer's dense ops that can hide it
  double ready_bytes = 0.0;  // n_grad^{i-1}: gradient bytes that become ready before layer i
};

struct FsmoeGradProblem {
  std::vector<FsmoeGradLayer> layers;  // backward execution order
  cost::AlphaBeta allreduce;           // FSMoE Sec. 5.1: t_grad(n) = alpha_ar + n beta_ar
  int max_degree = kFsmoeDefaultMaxDegree;
};

// FSMoE Sec. 5.2, step 1.
struct FsmoeGradStep1 {
  std::vector<FsmoeIntegerDegree> degree0;  // Algorithm 1 with t_gar = 0, per layer
  std::vector<double> t_olp;                // overlappable time: dense + t_olp,moe(r0)
  std::vector<double> first_bytes;          // Eq. 3: bytes hidden in layer i's window
  std::vector<double> carry_bytes;          // Eq. 4: bytes still unreduced after layer i
  std::vector<double> rem_bytes;            // Eq. 5's n_rem^i; sums to carry_bytes.back()
};

// Throws moecomm::Error on an empty or invalid problem.
void fsmoe_validate(const FsmoeGradProblem& p);

FsmoeGradStep1 fsmoe_gradient_step1(const FsmoeGradProblem& p);

// AllReduce time MoE layer i carries when x of the remaining bytes are added to its window.
double fsmoe_layer_gar_time(const FsmoeGradProblem& p, const FsmoeGradStep1& s1, std::size_t i,
                            double x);

// FSMoE Eq. 5 objective, sum_i f_moe^i(t_gar^i(x_i)), with f_moe^i the exact Algorithm 1
// optimum. Throws moecomm::Error if x breaks Eq. 5's constraints: x_i >= 0, what is assigned
// up to layer i is ready by then, and all remaining bytes are assigned.
double fsmoe_partition_objective(const FsmoeGradProblem& p, const FsmoeGradStep1& s1,
                                 const std::vector<double>& x);

struct FsmoeGradOptions {
  unsigned seed = 1;        // NLopt's random seed: the same seed gives the same plan
  int global_evals = 4000;  // split between GN_ISRES and then GN_CRS2_LM
  int local_evals = 400;    // LN_COBYLA polishing evaluations
};

struct FsmoeGradPlan {
  FsmoeGradStep1 step1;
  std::vector<double> assigned_bytes;        // x_g^i of Eq. 5
  std::vector<double> t_gar;                 // AllReduce time in each MoE layer's backward
  std::vector<FsmoeIntegerDegree> backward;  // Algorithm 1 at that t_gar: r and layer time
  double objective = 0.0;                    // Eq. 5 at assigned_bytes
};

FsmoeGradPlan fsmoe_partition_gradients(const FsmoeGradProblem& p,
                                        const FsmoeGradOptions& options = {});

}  // namespace moecomm::plan
