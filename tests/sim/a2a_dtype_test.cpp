// a2a_dtype in simulation: the token A2As' rows travel as the knob's dtype, and the simulator
// carries exactly their bytes on the links. On 2 nodes x 2 GPUs with ep=4, h = 256 and an
// fp32 model, each rank dispatches 2 x 128 tokens x top-2 = 512 rows, 128 to each member: to
// the 2 members on the other node 256 rows and to its node's other GPU 128. Everything else
// in the step (attention, gradients) is the same, so the links' bytes move by the 8 token
// A2As' (2 layers x 2 phases x dispatch and combine) rows times the bytes a row saves.
#include <gtest/gtest.h>

#include "sched/layer_builder.h"
#include "sim/simulator.h"

namespace moecomm::sim {
namespace {

sched::LayerSetup setup(const std::string& strategy) {
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
  s.model.dtype_bytes = 4;
  s.parallel = core::resolve_parallel(core::parse_parallel_spec("ep=4", "-"), 4, 4, "-");
  s.strategy = sched::parse_strategy(strategy, "-");
  s.layers = 2;
  return s;
}

std::vector<double> level_bytes(const std::string& strategy) {
  const sched::LayerSetup s = setup(strategy);
  return simulate(sched::build_training_step(s), core::Topology(s.cluster)).bytes_by_level;
}

TEST(A2ADtype, TheLinksCarryTheWireBytesOfTheTokenRows) {
  const std::vector<double> plain = level_bytes("baseline");
  ASSERT_EQ(plain.size(), 2u);
  EXPECT_EQ(level_bytes("a2a_dtype=fp32"), plain);
  // Per level, the step's token-A2A rows: 8 A2As x 4 ranks x the rows each sends there. The
  // levels' totals are sums over the step's flows, the gradients' ring chunks among them
  // (fractions of a byte): the differences hold to a thousandth of a byte.
  constexpr double kByte = 1e-3;
  const double node_rows = 8 * 4 * 256.0, gpu_rows = 8 * 4 * 128.0;
  for (const auto& [dtype, row] : {std::pair{"fp8", 264.0}, std::pair{"bf16", 512.0}}) {
    SCOPED_TRACE(dtype);
    const std::vector<double> wire = level_bytes(std::string("a2a_dtype=") + dtype);
    EXPECT_NEAR(plain[0] - wire[0], node_rows * (1024 - row), kByte);
    EXPECT_NEAR(plain[1] - wire[1], gpu_rows * (1024 - row), kByte);
  }
  // Per direction: fp8 toward the experts, bf16 back; each half of the A2As.
  const std::vector<double> deepep = level_bytes("a2a_dtype=fp8/bf16");
  EXPECT_NEAR(plain[0] - deepep[0], node_rows / 2 * (1024 - 264) + node_rows / 2 * (1024 - 512),
              kByte);
  EXPECT_NEAR(plain[1] - deepep[1], gpu_rows / 2 * (1024 - 264) + gpu_rows / 2 * (1024 - 512),
              kByte);
}

}  // namespace
}  // namespace moecomm::sim
