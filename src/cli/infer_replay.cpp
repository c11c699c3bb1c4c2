#include "cli/infer_replay.h"

#include <functional>
#include <numeric>
#include <ostream>

#include "infer/popularity_estimator.h"
#include "nn/moe_layer_factory.h"
#include "rt/mpi_base.h"

namespace moecomm::cli {

namespace {

// The wall time of f on the slowest rank, ranks lined up by a barrier first.
double timed(const std::function<void()>& f) {
  MPI_Barrier(MPI_COMM_WORLD);
  const double t0 = MPI_Wtime();
  f();
  double dt = MPI_Wtime() - t0;
  MPI_Allreduce(MPI_IN_PLACE, &dt, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return dt;
}

// Wall time of a local call on this rank (no barrier): planner and estimator costs.
template <typename F>
double local_time(F&& f) {
  const double t0 = MPI_Wtime();
  f();
  return MPI_Wtime() - t0;
}

// This rank's tokens [lo, hi) of the batch (flattened samples x tokens, starting at sample
// `first`) routed as the trace routed them at one layer.
nn::GateOutput trace_routing(const place::LayerRouting& layer, int first, int lo, int hi,
                             int experts) {
  const int k = layer.top_k(), tokens = layer.tokens();
  nn::GateOutput g;
  g.tokens = hi - lo;
  g.experts = experts;
  g.per_group = k;
  for (int t = 0; t < hi - lo; ++t) {
    const int global = lo + t;
    for (int j = 0; j < k; ++j) {
      g.token.push_back(t);
      g.expert.push_back(layer.at(first + global / tokens, global % tokens, j));
      g.weight.push_back(1.0f / static_cast<float>(k));
    }
  }
  return g;
}

// Lina Sec. 7.3.1's Ideal: "modify the gating network to constantly output a balanced expert
// selection". Slot s of the batch goes to expert s mod E: every expert gets the same number
// of slots (within one), from every rank (within one), and a token's k experts are distinct.
nn::GateOutput balanced_routing(int lo, int hi, int experts, int k) {
  nn::GateOutput g;
  g.tokens = hi - lo;
  g.experts = experts;
  g.per_group = k;
  for (int t = 0; t < hi - lo; ++t)
    for (int j = 0; j < k; ++j) {
      g.token.push_back(t);
      g.expert.push_back(static_cast<int>((static_cast<int64_t>(lo + t) * k + j) % experts));
      g.weight.push_back(1.0f / static_cast<float>(k));
    }
  return g;
}

// Token-slots per expert of balanced_routing over the whole batch: slots s = 0 .. T k - 1
// go to expert s mod E.
std::vector<int64_t> balanced_counts(int tokens, int experts, int k) {
  const int64_t slots = int64_t{tokens} * k;
  std::vector<int64_t> counts(static_cast<size_t>(experts), slots / experts);
  for (int64_t e = 0; e < slots % experts; ++e) ++counts[static_cast<size_t>(e)];
  return counts;
}

rt::ReplicaPlan to_replica_plan(const infer::ReplicationPlan& p) {
  return p.devices_of_expert;
}

// The first iterations of the trace, profiled (Sec. 5.2); the rest are evaluated.
place::RoutingTrace profile_part(const InferInputs& in) {
  place::RoutingTrace part;
  part.experts = in.trace.experts;
  part.top_k = in.trace.top_k;
  part.iterations.assign(in.trace.iterations.begin(),
                         in.trace.iterations.begin() + in.profile_iterations);
  return part;
}

core::RankGroup all_ranks(int world) {
  core::RankGroup all(static_cast<size_t>(world));
  std::iota(all.begin(), all.end(), 0);
  return all;
}

// One layer per variant, every expert in host memory, all on the baseline placement.
std::vector<std::unique_ptr<rt::ReplicatedMoeLayer>> variant_layers(const InferInputs& in,
                                                                    const rt::Comm& ep) {
  rt::CallOptions options;
  options.timeout_s = in.timeout_s;
  options.ranks_per_node = in.ranks_per_node;
  nn::MoeLayerSpec spec;
  spec.hidden = in.model.hidden;
  spec.ffn_hidden = in.model.ffn_hidden;
  spec.experts = in.model.experts;
  spec.top_k = in.model.top_k;
  spec.ffn_type = in.model.ffn_type;
  spec.seed = 7;
  std::vector<std::unique_ptr<rt::ReplicatedMoeLayer>> layer;
  for (int v = 0; v < kVariants; ++v) {
    layer.push_back(std::make_unique<rt::ReplicatedMoeLayer>(spec, ep, options, in.max_per_device));
    layer.back()->set_plan(rt::identity_plan(in.model.experts, in.ranks));
  }
  return layer;
}

int token_bound(int rank, const InferInputs& in) {
  return static_cast<int>(static_cast<int64_t>(rank) * in.batch_tokens / in.ranks);
}

}  // namespace

std::vector<InferReplay::Batch> InferReplay::cut_batches(const InferInputs& in) {
  std::vector<Batch> batches;
  const int samples = in.trace.samples();
  for (int it = in.profile_iterations; it < in.iterations(); ++it)
    for (int s = 0; s + in.batch_samples <= samples; s += in.batch_samples)
      batches.push_back({it, s});
  if (in.max_batches > 0 && static_cast<int>(batches.size()) > in.max_batches)
    batches.resize(static_cast<size_t>(in.max_batches));
  return batches;
}

InferReplay::InferReplay(const InferInputs& in, int rank)
    : in_(in),
      rank_(rank),
      profile_(profile_part(in), in.path_length),
      batches_(cut_batches(in)),
      pool_(MPI_COMM_WORLD, {{all_ranks(in.ranks), 0, "ep"}}),
      layer_(variant_layers(in, pool_.at({all_ranks(in.ranks), 0}))),
      ropt_{in.ranks, in.max_per_device},
      lo_(token_bound(rank, in)),
      hi_(token_bound(rank + 1, in)),
      x_(nn::Tensor::randn({hi_ - lo_, in.model.hidden}, 1000 + static_cast<uint64_t>(rank))) {}

// One untimed forward per variant (allocations, MPI connections).
void InferReplay::warm_up() {
  const nn::GateOutput g = balanced_routing(lo_, hi_, in_.model.experts, in_.model.top_k);
  for (auto& l : layer_) l->forward_routed(x_, g);
}

InferReplayResult InferReplay::run(std::ostream& progress) {
  warm_up();
  const size_t scored = static_cast<size_t>(in_.layers() - 1);  // each from its predecessor
  result_ = InferReplayResult{};
  result_.batches = batches_.size();
  result_.seconds.assign(kVariants, std::vector<std::vector<double>>(scored));
  result_.accurate.assign(scored, 0);
  result_.estimates.assign(scored, 0);
  for (size_t b = 0; b < batches_.size(); ++b) {
    for (int li = 1; li < in_.layers(); ++li) replay_layer(batches_[b], li);
    if (rank_ == 0)
      progress << "infer: batch " << b + 1 << "/" << batches_.size() << " done\n" << std::flush;
  }
  for (int v = 0; v < kVariants; ++v) result_.swaps[v] = layer_[static_cast<size_t>(v)]->swaps();
  return result_;
}

void InferReplay::replay_layer(const Batch& batch, int li) {
  const std::vector<place::LayerRouting>& routing =
      in_.trace.iterations[static_cast<size_t>(batch.iteration)];
  const int s0 = batch.first_sample, s1 = batch.first_sample + in_.batch_samples;
  const place::LayerRouting& lr = routing[static_cast<size_t>(li)];
  const nn::GateOutput g = trace_routing(lr, s0, lo_, hi_, in_.model.experts);
  const PhaseOne one = plan_phase_one(routing, s0, s1, li);
  // The actual counts after the gate (all ranks know them from the trace; Lina gets them
  // piggybacked on the A2A's metadata, not timed here).
  const std::vector<int64_t> counts = infer::expert_counts(lr, in_.model.experts, s0, s1);
  const size_t at = static_cast<size_t>(li - 1);
  const bool again = time_variants(g, counts, one, at);
  ++result_.estimates[at];
  result_.accurate[at] += again ? 0 : 1;
  result_.replanned += again ? 1 : 0;
}

// Before the gate, off the critical path (Lina overlaps it with layer li-1): Eq. 1's estimate
// from each token's path up to li-1, then phase one and its swap-in.
InferReplay::PhaseOne InferReplay::plan_phase_one(const std::vector<place::LayerRouting>& routing,
                                                  int s0, int s1, int li) {
  PhaseOne one;
  result_.estimate_s.push_back(local_time([&] {
    one.estimate = infer::estimate_popularity(
        profile_, li - 1, infer::token_paths(routing, li - 1, in_.path_length, s0, s1),
        in_.model.top_k);
  }));
  result_.phase_one_s.push_back(
      local_time([&] { one.plan = infer::plan_replication(one.estimate, ropt_); }));
  const rt::ReplicaPlan p1 = to_replica_plan(one.plan);
  result_.phase_one_swap_s.push_back(timed([&] {
    layer_[kNoFineTuning]->set_plan(p1);
    layer_[kLina]->set_plan(p1);
  }));
  return one;
}

// Times layer `at` + 1 of one batch for every variant; true when Lina's phase two re-planned.
bool InferReplay::time_variants(const nn::GateOutput& g, const std::vector<int64_t>& counts,
                                const PhaseOne& one, size_t at) {
  std::vector<std::vector<std::vector<double>>>& seconds = result_.seconds;
  seconds[kBaseline][at].push_back(timed([&] { layer_[kBaseline]->forward_routed(x_, g); }));
  infer::ReplicationPlan from_counts;
  seconds[kNoEstimation][at].push_back(timed([&] {
    from_counts = infer::plan_replication(infer::popularity_of_counts(counts), ropt_);
    const infer::ReplicationPlan& p = from_counts;
    layer_[kNoEstimation]->set_plan(to_replica_plan(p));
    layer_[kNoEstimation]->forward_routed(x_, g);
  }));
  seconds[kNoFineTuning][at].push_back(
      timed([&] { layer_[kNoFineTuning]->forward_routed(x_, g); }));
  bool again = false;
  infer::PhaseTwo two;
  seconds[kLina][at].push_back(timed([&] {
    const double t0 = MPI_Wtime();
    two = infer::fine_tune(one.plan, one.estimate, counts, in_.model.top_k, ropt_);
    again = two.replanned;
    if (again) layer_[kLina]->set_plan(to_replica_plan(two.plan));
    if (again) result_.replan_s.push_back(MPI_Wtime() - t0);
    layer_[kLina]->forward_routed(x_, g);
  }));
  const nn::GateOutput ideal = balanced_routing(lo_, hi_, in_.model.experts, in_.model.top_k);
  seconds[kIdeal][at].push_back(timed([&] { layer_[kIdeal]->forward_routed(x_, ideal); }));
  const infer::ReplicationPlan ep = infer::expert_parallel_plan(in_.model.experts, in_.ranks);
  record_balance(kBaseline, ep, counts);
  record_balance(kNoEstimation, from_counts, counts);
  record_balance(kNoFineTuning, one.plan, counts);
  record_balance(kLina, two.plan, counts);
  record_balance(kIdeal, ep, balanced_counts(in_.batch_tokens, in_.model.experts, in_.model.top_k));
  return again;
}

void InferReplay::record_balance(InferVariant v, const infer::ReplicationPlan& plan,
                                 const std::vector<int64_t>& counts) {
  result_.max_over_mean[v].push_back(
      infer::max_over_mean(infer::device_loads(plan, counts, in_.ranks)));
}

}  // namespace moecomm::cli
