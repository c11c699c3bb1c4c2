// Shared experts in simulation: they run on the compute stream while the dispatch A2A is in
// flight (DeepSeek-V3 Sec. 3.2.2, Megatron's --moe-shared-expert-overlap), so on a slow link
// they cost the step nothing until they outlast the A2A; a dense block runs no A2A.
#include <gtest/gtest.h>

#include "sched/layer_builder.h"
#include "sim/simulator.h"

namespace moecomm::sim {
namespace {

// 2 nodes x 2 GPUs joined by 1 GB/s: a dispatch of t k h x 2 bytes = 256 x 2 x 256 x 2 =
// 256 KiB per rank, half of it across the nodes, takes over 0.1 ms; a shared expert of
// 2 t h f x 2 GEMMs = 134 Mflop at 1e14 flop/s takes 1.3 us.
sched::LayerSetup setup(int64_t shared_experts, int64_t dense_layers = 0) {
  sched::LayerSetup s;
  s.cluster.name = "2x2";
  s.cluster.levels = {{"node", 2, 1e9, 1e-6}, {"gpu", 2, 100e9, 1e-6}};
  s.cluster.device.flops = 1e14;
  s.cluster.device.memory_bandwidth = 1e15;
  s.model.name += "m";  // appended: assigning trips GCC 12 -O3 -Wrestrict
  s.model.hidden = 256;
  s.model.ffn_hidden = 512;
  s.model.experts = 4;
  s.model.top_k = 2;
  s.model.layers = 2;
  s.model.heads = 4;
  s.model.seq_len = 128;
  s.model.micro_batch = 2;
  s.model.dtype_bytes = 2;
  s.model.shared_experts = shared_experts;
  s.model.dense_layers = dense_layers;
  s.parallel = core::resolve_parallel(core::parse_parallel_spec("ep=4", "-"), 4, 4, "-");
  s.strategy = sched::parse_strategy("baseline", "-");
  s.layers = 2;
  return s;
}

struct Span {
  double start = 0, end = 0;
};

Span span_of(const sched::Schedule& s, const SimResult& r, int rank, sched::OpRole role, int layer,
             sched::Phase phase) {
  for (sched::OpId id : s.ops_of(rank)) {
    const sched::Label& l = s.label(id);
    if (l.role == role && l.layer == layer && l.phase == phase)
      return {r.ops[size_t(id)].start, r.ops[size_t(id)].end};
  }
  ADD_FAILURE() << "no " << to_string(role) << " in layer " << layer;
  return {};
}

TEST(SharedExpertOverlap, SharedExpertsRunWhileTheFirstA2aIsInFlight) {
  const sched::LayerSetup with = setup(1), without = setup(0);
  const sched::Schedule a = sched::build_training_step(with);
  const sched::Schedule b = sched::build_training_step(without);
  const SimResult ra = simulate(a, core::Topology(with.cluster));
  const SimResult rb = simulate(b, core::Topology(without.cluster));
  for (int rank = 0; rank < 4; ++rank)
    for (int layer = 0; layer < 2; ++layer)
      for (sched::Phase phase : {sched::Phase::kForward, sched::Phase::kBackward}) {
        const Span shared = span_of(a, ra, rank, sched::OpRole::kSharedExpert, layer, phase);
        const Span a2a = span_of(a, ra, rank, sched::OpRole::kDispatchA2A, layer, phase);
        const Span expert = span_of(a, ra, rank, sched::OpRole::kExpert, layer, phase);
        // Both start together and the shared experts are done long before the A2A.
        EXPECT_DOUBLE_EQ(shared.start, a2a.start);
        EXPECT_GT(shared.end, shared.start);
        EXPECT_LT(shared.end, a2a.end);
        EXPECT_GE(expert.start, a2a.end);
      }
  // Hidden: the forward ends when it did without them (the gradients' AllReduce, larger by
  // the shared experts' weights, is after it).
  const Span fa = span_of(a, ra, 0, sched::OpRole::kCombineA2A, 1, sched::Phase::kForward);
  const Span fb = span_of(b, rb, 0, sched::OpRole::kCombineA2A, 1, sched::Phase::kForward);
  EXPECT_DOUBLE_EQ(fa.end, fb.end);
}

}  // namespace
}  // namespace moecomm::sim
