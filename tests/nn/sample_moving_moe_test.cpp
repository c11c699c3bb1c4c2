// NetMoE's moving MoE sublayer (sample_moving_moe.h) on EP ranks as threads against the
// non-moving computation: outputs land on the placement's ranks (permuted by it), input
// gradients come back to the old positions, and parameter gradients are equal.
#include "nn/sample_moving_moe.h"

#include <gtest/gtest.h>

#include <barrier>
#include <bit>
#include <functional>
#include <map>
#include <thread>

#include "nn/local_exchange.h"
#include "nn/moe_layer_factory.h"
#include "nn/moe_transformer.h"
#include "nn/synthetic_text.h"
#include "support/expect_error.h"
#include "threaded_exchange.h"

namespace moecomm::nn {
namespace {

// A2A-v between threads; the placement of layer l is a fixed function of l.
struct MoveBoard {
  explicit MoveBoard(int n, std::function<std::vector<int>(int)> place, int fwd = 1, int bwd = 1)
      : ranks(n),
        chunks_fwd(fwd),
        chunks_bwd(bwd),
        sync(n),
        send(static_cast<size_t>(n)),
        counts(static_cast<size_t>(n)),
        place(std::move(place)) {}
  int ranks, chunks_fwd, chunks_bwd;
  std::barrier<> sync;
  std::vector<std::vector<float>> send;
  std::vector<std::vector<int>> counts;  // elements per destination
  std::function<std::vector<int>(int)> place;
};

class ThreadedSampleExchange : public SampleExchange {
 public:
  ThreadedSampleExchange(MoveBoard& board, int rank) : b_(board), rank_(rank) {}
  int ranks() const override { return b_.ranks; }
  int rank() const override { return rank_; }
  Tensor rows(const Tensor& send, const std::vector<int>& send_rows, std::vector<int>& recv_rows,
              const char*, int) override {
    const int64_t cols = send.cols();
    std::vector<int> elems(send_rows);
    for (int& e : elems) e *= static_cast<int>(cols);
    std::vector<int> got_counts;
    const std::vector<float> got = a2a(send.values(), elems, got_counts);
    const std::vector<int> known = recv_rows;
    recv_rows.clear();
    for (int c : got_counts) recv_rows.push_back(static_cast<int>(c / cols));
    check_known(known, recv_rows);
    return Tensor({static_cast<int64_t>(got.size()) / cols, cols}, got);
  }
  std::vector<int> ints(const std::vector<int>& send, const std::vector<int>& counts, const char*,
                        const std::vector<int>& recv_counts) override {
    std::vector<float> f;  // carried bit for bit (weights and doubles travel as int bits)
    for (int v : send) f.push_back(std::bit_cast<float>(v));
    std::vector<int> got_counts;
    const std::vector<float> got = a2a(f, counts, got_counts);
    check_known(recv_counts, got_counts);
    std::vector<int> out;
    for (float v : got) out.push_back(std::bit_cast<int>(v));
    return out;
  }
  std::vector<int> all_gather(const std::vector<int>& mine) override {
    std::vector<int> out;
    for (int r = 0; r < b_.ranks; ++r) {
      std::vector<int> counts(static_cast<size_t>(b_.ranks), 0);
      counts[static_cast<size_t>(r)] = static_cast<int>(mine.size());
      const std::vector<int> got = ints(mine, counts, "", {});
      if (r == rank_) out = got;
    }
    return out;
  }
  void submit_placement(int, const std::vector<int>&, const std::vector<int>&) override {}
  std::vector<int> collect_placement(int layer) override { return b_.place(layer); }
  int chunks(bool backward) const override { return backward ? b_.chunks_bwd : b_.chunks_fwd; }

 private:
  // The receive counts a caller says it knows must be what arrives (an MPI A2A-v would
  // otherwise fail or misplace rows).
  static void check_known(const std::vector<int>& known, const std::vector<int>& got) {
    if (!known.empty() && known != got)
      throw std::logic_error("sample exchange: the known receive counts differ from the sent");
  }
  std::vector<float> a2a(const std::vector<float>& send, const std::vector<int>& counts,
                         std::vector<int>& got_counts) {
    b_.send[static_cast<size_t>(rank_)] = send;
    b_.counts[static_cast<size_t>(rank_)] = counts;
    b_.sync.arrive_and_wait();
    std::vector<float> out;
    got_counts.clear();
    for (int src = 0; src < b_.ranks; ++src) {
      const std::vector<int>& c = b_.counts[static_cast<size_t>(src)];
      int first = 0;
      for (int j = 0; j < rank_; ++j) first += c[static_cast<size_t>(j)];
      const int n = c[static_cast<size_t>(rank_)];
      const std::vector<float>& s = b_.send[static_cast<size_t>(src)];
      out.insert(out.end(), s.begin() + first, s.begin() + first + n);
      got_counts.push_back(n);
    }
    b_.sync.arrive_and_wait();
    return out;
  }
  MoveBoard& b_;
  int rank_;
};

constexpr int kRanks = 4, kBatch = 2, kSeq = 3, kHidden = 8;

// A placement that moves most samples: sample i goes to rank of (5 i + layer + 1) mod I.
std::vector<int> scrambled(int layer) {
  const int samples = kRanks * kBatch;
  std::vector<int> out(static_cast<size_t>(samples));
  for (int i = 0; i < samples; ++i)
    out[static_cast<size_t>(i)] = (5 * i + layer + 1) % samples / kBatch;
  return out;
}

MoeLayerSpec spec(float capacity = 0.0f) {
  return {.hidden = kHidden,
          .ffn_hidden = 12,
          .experts = kRanks * 2,
          .top_k = 2,
          .capacity_factor = capacity,
          .seed = 3};
}

void run_threads(const std::function<void(int)>& body) {
  std::vector<std::thread> threads;
  for (int r = 0; r < kRanks; ++r) threads.emplace_back(body, r);
  for (std::thread& t : threads) t.join();
}

// The layer alone, unchunked or with chunks (forward and backward degrees apart).
void check_layer(int chunks_fwd, int chunks_bwd) {
  // Reference: one process, every rank's tokens apart: y = h + MoE(LN2(h)).
  LocalExchange local;
  auto ref = make_moe_layer(spec(), local);
  LayerNorm ref_ln(kHidden);
  std::vector<Tensor> h, dy_home, y_ref, dh_ref;
  const std::vector<int> place = scrambled(0);
  for (int r = 0; r < kRanks; ++r) {
    h.push_back(Tensor::randn({kBatch * kSeq, kHidden}, 10 + r));
    dy_home.push_back(Tensor::randn({kBatch * kSeq, kHidden}, 20 + r));
    Tensor y = ref->forward(ref_ln.forward(h.back()));
    y.add(h.back());
    y_ref.push_back(y);
    Tensor dh = ref_ln.backward(ref->backward(dy_home.back(), 0.01f));
    dh.add(dy_home.back());
    dh_ref.push_back(dh);
  }
  std::map<std::string, Tensor> ref_grad;
  for (Param& p : ref->params()) ref_grad[p.name] = *p.grad;
  for (Param& p : ref_ln.params()) ref_grad["ln2." + p.name] = *p.grad;

  MoveBoard board(kRanks, scrambled, chunks_fwd, chunks_bwd);
  testing::ExchangeBoard unused(kRanks);
  std::vector<std::map<std::string, Tensor>> grads(kRanks);
  std::vector<std::vector<int>> samples(kRanks);
  std::vector<Tensor> y(kRanks), dh(kRanks);
  run_threads([&](int r) {
    testing::ThreadedExchange token(unused, r);
    ThreadedSampleExchange ex(board, r);
    auto moe = make_moe_layer(spec(), token);
    LayerNorm ln(kHidden);
    SampleMovingMoe moving(*moe, ln, 0, true, ex.ranks(), ex.rank());
    std::vector<int>& ids = samples[static_cast<size_t>(r)];
    for (int b = 0; b < kBatch; ++b) ids.push_back(r * kBatch + b);
    y[static_cast<size_t>(r)] = moving.forward(h[static_cast<size_t>(r)], kSeq, ids, ex);
    Tensor dy({kBatch * kSeq, kHidden});  // each new sample's gradient, from its home rank
    for (int b = 0; b < kBatch; ++b) {
      const int i = ids[static_cast<size_t>(b)];
      dy.set_rows(b * kSeq,
                  dy_home[static_cast<size_t>(i / kBatch)].slice_rows(i % kBatch * kSeq, kSeq));
    }
    dh[static_cast<size_t>(r)] = moving.backward(dy, 0.01f, ex);
    for (Param& p : moe->params()) grads[static_cast<size_t>(r)][p.name] = *p.grad;
    for (Param& p : ln.params()) grads[static_cast<size_t>(r)]["ln2." + p.name] = *p.grad;
  });
  int moved = 0;
  for (int r = 0; r < kRanks; ++r)
    for (int b = 0; b < kBatch; ++b) {
      const int i = samples[static_cast<size_t>(r)][static_cast<size_t>(b)];
      EXPECT_EQ(place[static_cast<size_t>(i)], r);
      moved += i / kBatch != r;
      const Tensor want =
          y_ref[static_cast<size_t>(i / kBatch)].slice_rows(i % kBatch * kSeq, kSeq);
      EXPECT_LE(max_abs_diff(y[static_cast<size_t>(r)].slice_rows(b * kSeq, kSeq), want), 1e-5f);
    }
  EXPECT_GT(moved, 0);
  for (int r = 0; r < kRanks; ++r)
    EXPECT_LE(max_abs_diff(dh[static_cast<size_t>(r)], dh_ref[static_cast<size_t>(r)]), 1e-5f);
  for (auto& [name, want] : ref_grad) {  // dense: summed over ranks; experts: on their rank
    Tensor sum(want.shape());
    for (int r = 0; r < kRanks; ++r)
      if (grads[static_cast<size_t>(r)].count(name)) sum.add(grads[static_cast<size_t>(r)][name]);
    EXPECT_LE(max_abs_diff(sum, want), 1e-5f) << name;
  }
}

TEST(SampleMovingMoe, OutputsLandOnTheNewRanksAndGradientsMatch) {
  check_layer(1, 1);
}

// FSMoE / Lina pipelining of the layer: chunks of every (source, expert) block, some empty.
TEST(SampleMovingMoe, ChunkedOutputsLandOnTheNewRanksAndGradientsMatch) {
  check_layer(3, 2);
  check_layer(2, 5);
  check_layer(4, 1);
}

TEST(SampleMovingMoe, NeedsTheDroplessLayout) {
  testing::ExchangeBoard unused(kRanks);
  MoveBoard board(kRanks, scrambled);
  testing::ThreadedExchange token(unused, 0);
  ThreadedSampleExchange ex(board, 0);
  auto moe = make_moe_layer(spec(1.0f), token);
  LayerNorm ln(kHidden);
  EXPECT_ERROR_HAS(SampleMovingMoe(*moe, ln, 0, false, ex.ranks(), ex.rank()), "dropless");
  MoeTransformerConfig c;
  c.moe.capacity_factor = 1.0f;
  MoeTransformer model(c, token);
  EXPECT_ERROR_HAS(model.move_samples(ex), "dropless");
}

// The whole model: per-sample losses by global id, each rank's aux loss (of its home samples,
// wherever they sit) and gradients summed over ranks equal those of the non-moving EP model,
// with the default aux loss weight; chunked (forward and backward degrees apart) or not.
void check_transformer(int chunks_fwd, int chunks_bwd) {
  MoeTransformerConfig c;
  c.vocab = 16, c.max_seq = kSeq, c.hidden = kHidden, c.heads = 2, c.layers = 2;
  c.moe = spec();
  EXPECT_GT(c.aux_loss_weight, 0.0f);
  const SyntheticText text({16, 3, 5});
  std::vector<TextBatch> data;
  for (int r = 0; r < kRanks; ++r) data.push_back(text.sample(kBatch, kSeq, 0, r));
  std::vector<std::map<std::string, Tensor>> grads[2];
  std::vector<float> sample_loss[2], aux[2];
  for (int moving = 0; moving < 2; ++moving) {
    testing::ExchangeBoard tokens(kRanks);
    MoveBoard board(kRanks, scrambled, chunks_fwd, chunks_bwd);
    grads[moving].resize(kRanks);
    sample_loss[moving].assign(kRanks * kBatch, 0.0f);
    aux[moving].assign(kRanks, 0.0f);
    run_threads([&](int r) {
      testing::ThreadedExchange token(tokens, r);
      ThreadedSampleExchange ex(board, r);
      MoeTransformer model(c, token);
      if (moving) model.move_samples(ex);
      model.zero_grad();
      model.forward(data[static_cast<size_t>(r)].tokens, data[static_cast<size_t>(r)].targets,
                    kSeq);
      model.backward();
      aux[moving][static_cast<size_t>(r)] = model.aux_loss();
      const std::vector<float> loss = model.sample_lm_losses();
      for (size_t b = 0; b < loss.size(); ++b)
        sample_loss[moving][static_cast<size_t>(model.sample_ids()[b])] = loss[b];
      if (moving) {  // after the last layer's placement, ascending
        for (int i : model.sample_ids())
          EXPECT_EQ(scrambled(c.layers - 1)[static_cast<size_t>(i)], r);
      }
      for (Param* p : model.params()) grads[moving][static_cast<size_t>(r)][p->name] = *p->grad;
    });
  }
  for (int i = 0; i < kRanks * kBatch; ++i)
    EXPECT_NEAR(sample_loss[1][static_cast<size_t>(i)], sample_loss[0][static_cast<size_t>(i)],
                1e-5f)
        << i;
  for (int r = 0; r < kRanks; ++r) {
    EXPECT_GT(aux[0][static_cast<size_t>(r)], 0.0f);
    EXPECT_NEAR(aux[1][static_cast<size_t>(r)], aux[0][static_cast<size_t>(r)], 1e-5f) << r;
  }
  for (int owner = 0; owner < kRanks; ++owner)
    for (auto& [name, t] : grads[0][static_cast<size_t>(owner)]) {
      Tensor a(t.shape()), b(t.shape());
      for (int r = 0; r < kRanks; ++r) {
        if (!grads[0][static_cast<size_t>(r)].count(name)) continue;
        a.add(grads[0][static_cast<size_t>(r)][name]);
        b.add(grads[1][static_cast<size_t>(r)].at(name));
      }
      EXPECT_LE(max_abs_diff(a, b), 1e-5f) << name;
    }
}

TEST(SampleMovingMoe, TransformerFollowsTheSamples) {
  check_transformer(1, 1);
}

// FSMoE / Lina pipelining under NetMoE: chunks of every (source, expert) block, some empty.
TEST(SampleMovingMoe, ChunkedTransformerFollowsTheSamples) {
  check_transformer(3, 2);
  check_transformer(2, 5);
}

}  // namespace
}  // namespace moecomm::nn
