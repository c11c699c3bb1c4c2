#include "nn/gate.h"

#include "core/error.h"
#include "core/model_config.h"

namespace moecomm::nn {

void Gate::zero_grad() {
  for (Param& p : params()) p.grad->fill(0.0f);
}

void AuxStats::add(const AuxStats& o) {
  tokens += o.tokens;
  for (size_t e = 0; e < count.size(); ++e) {
    count[e] += o.count.at(e);
    value[e] += o.value.at(e);
  }
}

void Gate::add_aux_stats(const std::vector<int>&, std::vector<AuxStats>&) const {
  throw Error("gate", "this gate's aux loss cannot be regrouped");
}

float Gate::aux_of(const AuxStats&) const {
  throw Error("gate", "this gate's aux loss cannot be regrouped");
}

void Gate::regroup_aux(std::vector<int> group, std::vector<AuxStats> stats) {
  if (!groups_aux()) throw Error("gate", "this gate's aux loss cannot be regrouped");
  aux_groups_ = {std::move(group), std::move(stats)};
}

void check_gate_shape(int hidden, int experts, int k, const char* where) {
  if (hidden <= 0 || experts <= 0) throw Error(where, "hidden and experts must be positive");
  if (k <= 0 || k > experts) throw Error(where, "k must be in [1, experts]");
}

void check_gate_groups(int experts, int k, int router_groups, int router_group_top_k,
                       const char* where) {
  if (const auto problem =
          core::router_groups_problem(experts, k, router_groups, router_group_top_k))
    throw Error(std::string(where) + ": " + problem->key, problem->message);
}

}  // namespace moecomm::nn
