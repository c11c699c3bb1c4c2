// HybridEP's codec config on the runtime comes from the schedule's expert AllGathers
// (sched::WireCodec), not from the strategy: a hand-made schedule whose AllGathers carry a
// codec no strategy named gives exactly that codec; disagreeing or non-fp32 codecs, or a rank
// without an expert AllGather, are refused by name.
#include <gtest/gtest.h>

#include "../support/expect_error.h"
#include "rt/expert_transfer_binding.h"

namespace moecomm::rt {
namespace {

sched::CollectiveSpec gather(int layer, const sched::WireCodec& codec) {
  sched::CollectiveSpec s;
  s.kind = sched::OpKind::kAllGather;
  s.group = {0, 1};
  s.bytes = 64;
  s.label.role = sched::OpRole::kExpertTransferAllGather;
  s.label.layer = layer;
  s.codec = codec;
  return s;
}

void expect_config(const HybridCodecConfig& got, const HybridCodecConfig& want) {
  EXPECT_EQ(got.compression, want.compression);
  EXPECT_EQ(got.shared_expert, want.shared_expert);
  EXPECT_EQ(got.experts, want.experts);
  EXPECT_EQ(got.feedback, want.feedback);
}

TEST(ExpertCodecConfig, TakesTheAllGathersCodec) {
  const sched::WireCodec codec{core::Dtype::kFp32, 0.3, false, true};
  sched::Schedule s(2);
  for (int layer = 0; layer < 2; ++layer) s.add_collective(gather(layer, codec), 1);
  for (int rank = 0; rank < 2; ++rank)
    expect_config(expert_codec_config(s, rank, 8), HybridCodecConfig{0.3, false, 8, true});
  sched::Schedule dense(2);
  dense.add_collective(gather(0, sched::WireCodec{}), 1);
  expect_config(expert_codec_config(dense, 0, 4), HybridCodecConfig{1.0, false, 4, false});
}

TEST(ExpertCodecConfig, RefusesWhatOneCodecCannotRun) {
  sched::Schedule mixed(2);
  mixed.add_collective(gather(0, {core::Dtype::kFp32, 0.3, true, false}), 1);
  mixed.add_collective(gather(1, {core::Dtype::kFp32, 0.5, true, false}), 1);
  EXPECT_ERROR_HAS(expert_codec_config(mixed, 0, 8), "op 2 (rank 0, stream 1",
                   "\"moe.hybrid.expert_allgather\"", "carries another codec than op 0");
  sched::Schedule half(2);
  half.add_collective(gather(0, {core::Dtype::kBf16, 0.3, true, false}), 1);
  EXPECT_ERROR_HAS(expert_codec_config(half, 1, 8), "codec dtype bf16",
                   "the runtime's experts travel as fp32");
  sched::Schedule none(2);
  none.add_compute(0, 0, 1, 1, sched::Label{});
  EXPECT_ERROR_HAS(expert_codec_config(none, 0, 8), "rank 0's schedule", "has no expert AllGather");
}

}  // namespace
}  // namespace moecomm::rt
