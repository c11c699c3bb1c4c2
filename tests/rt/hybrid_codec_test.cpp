// HybridEP's experts on the wire (rt/hybrid_codec.h), moved by the collectives the schedule
// runs them with (the domain AllGather, the gradients' ReduceScatter over the domain, the
// shared expert's AllReduce over the EP group), on every rank of the world as one EP group:
// the copies a rank receives are exactly the owners' experts (compression 1) or the owners' SR
// encoding decoded against the shared expert, the mean of all experts (Sec. IV-B); the copies'
// gradients return to their owners summed over the domain.
#include <gtest/gtest.h>

#include <algorithm>

#include "mpi_test_util.h"
#include "nn/moe_layer_factory.h"
#include "nn/sr_codec.h"
#include "rt/collectives.h"
#include "rt/comm_pool.h"
#include "rt/hybrid_codec.h"
#include "rt/hybrid_layout.h"
#include "rt/mpi_token_exchange.h"
#include "rt/train_groups.h"

namespace moecomm::rt {
namespace {

constexpr int kOwn = 2;  // experts per rank

nn::MoeLayerSpec spec(int experts) {
  nn::MoeLayerSpec s;
  s.hidden = 8;
  s.ffn_hidden = 12;
  s.experts = experts;
  s.seed = 5;
  return s;
}

// Global expert e's parameter i after its owner's "training": a value only the owner sets.
// Multiples of 1/64: sums over the experts, and their mean over a power-of-two E, are exact
// in fp32 in any order, so the shared expert is bit-exact whatever the AllReduce's order.
float trained(int e, size_t i) {
  return float(int((e * 37 + i * 11) % 64) - 32) / 64.0f;
}

// Global expert e's parameters, flat, as the owner holds them.
std::vector<float> owner_weights(const std::vector<nn::Param>& shape, int e) {
  std::vector<float> out;
  for (const nn::Param& p : shape)
    for (int64_t i = 0; i < p.value->size(); ++i) out.push_back(trained(e, out.size()));
  return out;
}

struct Setup {
  HybridLayout layout;
  CommPool pool;
  std::unique_ptr<MpiTokenExchange> exchange;
  std::unique_ptr<nn::MoeLayer> layer;
};

std::unique_ptr<Setup> make_setup(int domain) {
  const int n = test::world_size(), me = test::world_rank();
  auto s = std::make_unique<Setup>();
  const core::RankGroup ep = test::all_ranks();
  s->layout = hybrid_layout(ep, me, domain, {}, "test");
  const core::ParallelConfig parallel = train_groups(n, 1, n, kOwn * n, me, "test").parallel;
  std::vector<CommKey> keys = hybrid_comm_keys(parallel, domain, {}, 3);
  s->pool = CommPool(MPI_COMM_WORLD, keys);
  CallOptions call{.label = "test", .timeout_s = test::kTimeout, .ranks_per_node = 2};
  s->exchange = std::make_unique<MpiTokenExchange>(s->pool.at({s->layout.peers, 0}), call);
  s->layer = nn::make_moe_layer(spec(kOwn * n), *s->exchange);
  for (int j = s->layout.offset * kOwn; j < (s->layout.offset + 1) * kOwn; ++j) {
    std::vector<nn::Param> params = s->layer->expert(j).params();
    const std::vector<float> w = owner_weights(params, s->layer->first_expert() + j);
    size_t at = 0;
    for (nn::Param& p : params)
      for (int64_t i = 0; i < p.value->size(); ++i) p.value->data()[i] = w[at++];
  }
  return s;
}

std::vector<float> flat(const std::vector<nn::Param>& params) {
  std::vector<float> out;
  for (const nn::Param& p : params)
    out.insert(out.end(), p.value->data(), p.value->data() + p.value->size());
  return out;
}

CallOptions call() {
  return {.label = "test", .timeout_s = test::kTimeout, .ranks_per_node = 2};
}

// The codec, with the shared expert initialised from the EP group's AllReduced sum.
std::unique_ptr<HybridCodec> make_codec(Setup& s, double compression, bool shared,
                                        bool feedback = false) {
  auto codec = std::make_unique<HybridCodec>(
      std::vector<nn::MoeLayer*>{s.layer.get()}, s.layout.offset * kOwn, kOwn, s.layout.domain_size,
      s.layout.offset, HybridCodecConfig{compression, shared, kOwn * test::world_size(), feedback});
  if (codec->shares()) {
    std::vector<float> sum = codec->own_sum(0);
    all_reduce_sum(s.pool.at({test::all_ranks(), 3}), sum, call());
    codec->set_shared_sum(0, sum);
  }
  return codec;
}

// One step's expert transfer: the own experts encoded, gathered over the domain, decoded.
void receive(Setup& s, HybridCodec& codec) {
  codec.refresh_shared(0);
  const std::vector<std::byte>& mine = codec.encode(0);
  std::vector<std::byte> all(mine.size() * size_t(s.layout.domain_size));
  all_gather(s.pool.at({s.layout.domain, 3}), mine, all, call());
  codec.decode(0, all);
}

// The copies' gradients home: every slot's gradient reduce-scattered over the domain.
void return_grads(Setup& s, HybridCodec& codec) {
  const std::vector<float> slots = codec.slot_grads(0);
  codec.take_grads(0, reduce_scatter_sum(s.pool.at({s.layout.domain, 3}), slots, call()));
}

// What a copy of global expert e must hold: the owner's weights through SR with k per tensor.
std::vector<float> expected_copy(const std::vector<nn::Param>& shape, int e, double compression,
                                 const std::vector<float>& shared) {
  const std::vector<float> w = owner_weights(shape, e);
  if (compression >= 1) return w;
  std::vector<float> out(w.size());
  size_t at = 0;
  for (const nn::Param& p : shape) {
    const size_t n = static_cast<size_t>(p.value->size());
    const std::span<const float> s =
        shared.empty() ? std::span<const float>() : std::span<const float>(shared).subspan(at, n);
    const auto enc = nn::sr_encode(std::span<const float>(w).subspan(at, n), s,
                                   nn::sr_kept(static_cast<int64_t>(n), compression));
    nn::sr_decode(enc, s, std::span<float>(out).subspan(at, n));
    at += n;
  }
  return out;
}

TEST(HybridCodec, CopiesAreTheOwnersExpertsThroughSr) {
  const int n = test::world_size();
  for (int domain : {2, n}) {
    for (auto [compression, shared] : {std::pair{1.0, true}, {0.1, true}, {0.1, false}}) {
      SCOPED_TRACE(::testing::Message() << "domain " << domain << " compression " << compression
                                        << " shared " << shared);
      auto s = make_setup(domain);
      auto codec = make_codec(*s, compression, shared);
      receive(*s, *codec);
      const std::vector<nn::Param> shape = s->layer->expert(0).params();
      std::vector<float> mean;  // the shared expert: the mean of all E experts
      if (compression < 1 && shared) {
        mean.assign(owner_weights(shape, 0).size(), 0.0f);
        for (int e = 0; e < kOwn * n; ++e) {
          const std::vector<float> w = owner_weights(shape, e);
          for (size_t i = 0; i < w.size(); ++i) mean[i] += w[i];
        }
        for (float& m : mean) m *= 1.0f / float(kOwn * n);
      }
      for (int j = 0; j < s->layer->local_experts(); ++j) {
        const int e = s->layer->first_expert() + j;
        const bool own = j / kOwn == s->layout.offset;
        const std::vector<float> want =
            own ? owner_weights(shape, e) : expected_copy(shape, e, compression, mean);
        const std::vector<float> got = flat(s->layer->expert(j).params());
        ASSERT_EQ(got.size(), want.size());
        float worst = 0;
        for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::abs(got[i] - want[i]));
        EXPECT_EQ(worst, 0.0f) << "expert " << e;
      }
      if (compression < 1) {
        EXPECT_EQ(codec->wire_bytes_per_expert(),
                  8 * (nn::sr_kept(8 * 12, 0.1) * 2 + nn::sr_kept(12, 0.1) + nn::sr_kept(8, 0.1)));
      }
    }
  }
}

// Error feedback (sr_feedback): the first step sends what plain SR sends; each later step the
// top-k of what the copies still miss, so with the owners' weights fixed every copy is the
// owner's expert bit for bit once every entry has had its turn (numel / k steps per tensor),
// while plain SR's copies keep missing the same tail.
TEST(HybridCodec, FeedbackCopiesConvergeToTheOwnersExperts) {
  const int n = test::world_size();
  const int rounds = 8 * 12 / static_cast<int>(nn::sr_kept(8 * 12, 0.1));  // the slowest tensor
  for (bool shared : {true, false}) {
    for (bool feedback : {true, false}) {
      SCOPED_TRACE(::testing::Message() << "shared " << shared << " feedback " << feedback);
      auto s = make_setup(n);
      auto codec = make_codec(*s, 0.1, shared, feedback);
      const std::vector<nn::Param> shape = s->layer->expert(0).params();
      float first_gap = 0;  // the largest copy error after the first step
      for (int round = 1; round <= rounds; ++round) {
        receive(*s, *codec);
        float worst = 0;
        for (int j = 0; j < s->layer->local_experts(); ++j) {
          const std::vector<float> want = owner_weights(shape, s->layer->first_expert() + j);
          const std::vector<float> got = flat(s->layer->expert(j).params());
          for (size_t i = 0; i < got.size(); ++i)
            worst = std::max(worst, std::abs(got[i] - want[i]));
        }
        if (round == 1) first_gap = worst;
        if (round == rounds) {
          EXPECT_GT(first_gap, 0.1f);
          if (feedback)
            EXPECT_EQ(worst, 0.0f);
          else
            EXPECT_EQ(worst, first_gap);
        }
      }
    }
  }
}

TEST(HybridCodec, CopiesGradientsReturnSummedToTheirOwners) {
  const int n = test::world_size(), me = test::world_rank();
  for (int domain : {2, n}) {
    SCOPED_TRACE("domain " + std::to_string(domain));
    auto s = make_setup(domain);
    auto codec = make_codec(*s, 1.0, true);
    const int first_member = me - s->layout.offset;  // the domain's first global rank
    auto grad_of = [](int rank, int slot, size_t i) {
      return float(rank * 1000 + slot * 10) + 0.5f * float(i % 7);
    };
    for (int j = 0; j < s->layer->local_experts(); ++j) {
      size_t at = 0;
      for (nn::Param& p : s->layer->expert(j).params())
        for (int64_t i = 0; i < p.grad->size(); ++i) p.grad->data()[i] = grad_of(me, j, at++);
    }
    return_grads(*s, *codec);
    for (int j = 0; j < s->layer->local_experts(); ++j) {
      const bool own = j / kOwn == s->layout.offset;
      size_t at = 0;
      for (nn::Param& p : s->layer->expert(j).params()) {
        for (int64_t i = 0; i < p.grad->size(); ++i, ++at) {
          float want = 0;
          for (int m = 0; m < domain && own; ++m) want += grad_of(first_member + m, j, at);
          ASSERT_EQ(p.grad->data()[i], want) << "slot " << j << " index " << at;
        }
      }
    }
  }
}

}  // namespace
}  // namespace moecomm::rt
