#pragma once
// The Gate module (FSMoE Sec. 3.1): routes tokens x [T, M] to experts. Its output is a list
// of slots (token, expert, combine weight): the Order module lays the slots out per expert,
// and the I-Order module sums expert outputs back per token weighted by the slot weights:
//   y_t = sum over slots s with token t of weight_s * Expert_{expert_s}(x_t).
// Token choice (GShard, sigmoid, X-MoE): k slots per token, slot s = t * k + j for the
// token's j-th choice (j = 0 is its best). Expert choice: C slots per expert, slot
// s = e * C + c for the expert's c-th pick (c = 0 is its best).
#include <cstdint>
#include <utility>
#include <vector>

#include "nn/param.h"
#include "nn/tensor.h"

namespace moecomm::nn {

struct GateOutput {
  int tokens = 0;
  int experts = 0;
  bool expert_choice = false;
  int per_group = 0;          // k (slots per token) or, for expert choice, C (slots per expert)
  std::vector<int> token;     // per slot
  std::vector<int> expert;    // per slot
  std::vector<float> weight;  // per slot: combine weight
  float aux_loss = 0.0f;      // load-balancing auxiliary loss (0 where the gate has none)

  int slots() const { return static_cast<int>(token.size()); }
};

// Load-balancing statistics of one group of tokens. The token-choice gates' aux losses are
// functions of per-expert sums over the group's tokens (GShard Sec. 2.2, StableMoE eq. 3):
//   count_e = sum_t c[t, e] (a count: no gradient), value_e = sum_t v[t, e] (differentiable),
// so groups held apart (NetMoE: tokens by home rank, wherever they sit) add up exactly.
struct AuxStats {
  double tokens = 0;
  std::vector<double> count, value;  // per expert

  explicit AuxStats(int experts = 0)
      : count(static_cast<size_t>(experts), 0.0), value(static_cast<size_t>(experts), 0.0) {}
  void add(const AuxStats& o);
};

// The group of every token and every group's statistics (empty: the forward's own tokens).
struct AuxGroups {
  std::vector<int> group;       // per token
  std::vector<AuxStats> stats;  // per group

  bool empty() const { return group.empty(); }
  const AuxStats& of(int64_t t) const {
    return stats.at(static_cast<size_t>(group.at(static_cast<size_t>(t))));
  }
};

class Gate {
 public:
  virtual ~Gate() = default;
  // Routes x [T, M]; keeps what backward needs (one forward, then its backward).
  virtual GateOutput forward(const Tensor& x) = 0;
  // grad_weight: dL/d weight per slot; grad_aux: dL/d aux_loss (the aux coefficient).
  // Returns dL/dx [T, M] through the gate; accumulates the gate's parameter gradients.
  virtual Tensor backward(const std::vector<float>& grad_weight, float grad_aux) = 0;
  virtual std::vector<Param> params() = 0;
  void zero_grad();

  // Regrouped aux loss (NetMoE, where a rank holds tokens of other ranks' batches):
  // whether the gate supports the three calls below (default: no, they throw).
  virtual bool groups_aux() const { return false; }
  // Adds the last forward's token t to stats[group[t]] (stats: one per group, sized).
  virtual void add_aux_stats(const std::vector<int>& group, std::vector<AuxStats>& stats) const;
  // The aux loss of a group with these statistics.
  virtual float aux_of(const AuxStats& stats) const;
  // The next backward differentiates, for each token t, the aux loss of its group
  // stats[group[t]] (grad_aux scales it as before) instead of the forward's own aux.
  void regroup_aux(std::vector<int> group, std::vector<AuxStats> stats);

 protected:
  // For backward: the regrouping set since the last backward, cleared.
  AuxGroups take_aux_groups() { return std::exchange(aux_groups_, {}); }

 private:
  AuxGroups aux_groups_;
};

// Throws moecomm::Error (where: the gate's name) unless hidden, experts > 0, 1 <= k <= experts.
void check_gate_shape(int hidden, int experts, int k, const char* where);
// The token-choice gates' node-limited routing (core::router_groups_problem): throws
// moecomm::Error at "<where>: router_groups" or "<where>: router_group_top_k".
void check_gate_groups(int experts, int k, int router_groups, int router_group_top_k,
                       const char* where);

}  // namespace moecomm::nn
