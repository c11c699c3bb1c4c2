#pragma once
// Row-wise pieces shared by the gates: softmax and its backward, top-k selection, the
// normalised top-k combine weights and the Switch/GShard load-balancing loss.
#include <vector>

#include "nn/tensor.h"

namespace moecomm::nn {

// p = softmax(h) per row.
Tensor softmax_rows(const Tensor& h);
// dh = p * (dp - sum_j p_j dp_j) per row.
Tensor softmax_rows_backward(const Tensor& p, const Tensor& dp);

// Indices of the k largest entries of each row of s, best first (ties: lower index).
std::vector<int> topk_rows(const Tensor& s, int k);

// Node-limited top-k (DeepSeek-V2 Sec. 2.2.2, DeepSeek-V3 Sec. 2.1.2): the E columns split
// into `groups` equal contiguous groups (expert e in group e / (E / groups)). A row's group
// score is the sum of its group's two largest affinities (DeepSeek-V3's sum of the top
// K_r / M = 8 / 4 affinities of a node, as its released model.py takes them; with one expert
// per group, that expert's affinity); the row keeps its best group_top_k groups (ties: lower
// group) and takes the k largest scores among their experts, best first (ties: lower index).
// `scores` rank the experts as topk_rows does; `affinity` (the same shape: the gate's
// probabilities or sigmoids) scores the groups. Without a limit (core::limits_groups false)
// this is topk_rows(scores, k).
std::vector<int> group_limited_topk_rows(const Tensor& scores, const Tensor& affinity, int k,
                                         int groups, int group_top_k);

// Token-choice slots from probabilities p [T, E] and choices [T * k]: weight of slot
// (t, j) is p[t, e_j], divided by sum_j p[t, e_j] when normalize (GShard top-2).
void fill_topk_slots(const Tensor& p, const std::vector<int>& choice, int k, bool normalize,
                     std::vector<int>& token, std::vector<int>& expert, std::vector<float>& weight);
// dp [T, E] from dL/d weight of the slots above (accumulated into dp).
void topk_slots_backward(const Tensor& p, const std::vector<int>& choice, int k, bool normalize,
                         const std::vector<float>& grad_weight, Tensor& dp);

// Load-balancing loss (GShard Sec. 2.2 / Switch eq. 4, Tutel's scaling):
//   aux = E * sum_e f_e * m_e,  f_e = (1/T) #{t : top-1 choice of t is e},  m_e = mean_t p[t, e].
// f is a count (no gradient), so d aux / d p[t, e] = E * f_e / T.
float load_balance_loss(const Tensor& p, const std::vector<int>& choice, int k);
void load_balance_backward(const Tensor& p, const std::vector<int>& choice, int k, float grad_aux,
                           Tensor& dp);

// The same loss by token groups (NetMoE: by home rank): token t adds 1 to tokens, 1 to
// count[top-1 of t] and p[t, :] to value of stats[group[t]]; a group's loss is
// E * sum_e count_e value_e / T^2, and d aux_g / d p[t, e] = E * count_e / T^2 for t in g.
struct AuxStats;
struct AuxGroups;
void add_load_balance_stats(const Tensor& p, const std::vector<int>& choice, int k,
                            const std::vector<int>& group, std::vector<AuxStats>& stats);
float load_balance_of(const AuxStats& stats);
void load_balance_backward(const Tensor& p, const AuxGroups& groups, float grad_aux, Tensor& dp);

// The softmax top-k head GShard and X-MoE share: slots of the chosen experts weighted by p,
// and the load-balancing loss.
struct GateOutput;
GateOutput softmax_topk_output(const Tensor& p, const std::vector<int>& choice, int experts, int k,
                               bool normalize);
// Its backward: d scores [T, E] from dL/d slot weight and dL/d aux (of each token's group
// where groups is not empty).
Tensor softmax_topk_backward(const Tensor& p, const std::vector<int>& choice, int k, bool normalize,
                             const std::vector<float>& grad_weight, float grad_aux,
                             const AuxGroups& groups);

}  // namespace moecomm::nn
