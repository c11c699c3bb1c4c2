// The MoE layer: a hand-computed case, a per-token reference, hooks, gradients against finite
// differences for every gate x order x expert, and EP ranks (threads) against one process.
#include "nn/moe_layer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <thread>

#include "grad_check.h"
#include "nn/local_exchange.h"
#include "nn/moe_layer_factory.h"
#include "nn/order.h"
#include "support/expect_error.h"
#include "threaded_exchange.h"

namespace moecomm::nn {
namespace {

constexpr float kAuxCoef = 0.3f;

float sigmoid(float v) {
  return 1.0f / (1.0f + std::exp(-v));
}

TEST(MoeLayer, HandComputedTinyCase) {
  MoeLayerSpec spec;
  spec.hidden = 1;
  spec.ffn_hidden = 1;
  spec.experts = 2;
  spec.top_k = 1;
  spec.ffn_type = core::FfnType::kSwiglu;
  LocalExchange ex;
  auto layer = make_moe_layer(spec, ex);
  *layer->gate().params()[0].value = Tensor({1, 2}, {1, -1});
  const float w[2][3] = {{1, 2, 3}, {2, 1, -1}};  // w1, w3, w2 per expert
  for (int e = 0; e < 2; ++e)
    for (int i = 0; i < 3; ++i)
      layer->expert(e).params()[static_cast<size_t>(i)].value->fill(w[e][i]);
  const Tensor y = layer->forward(Tensor({2, 1}, {1, -1}));
  // Token 0: logits (1, -1) -> expert 0, weight sigmoid(2); SiLU(1) * 2 * 3.
  EXPECT_NEAR(y[0], sigmoid(2) * 6 * sigmoid(1), 1e-6f);
  // Token 1: logits (-1, 1) -> expert 1, weight sigmoid(2); SiLU(-2) * (-1) * (-1).
  EXPECT_NEAR(y[1], sigmoid(2) * (-2 * sigmoid(-2)), 1e-6f);
  EXPECT_NEAR(layer->aux_loss(), 1.0f, 1e-6f);  // balanced: f = m = (1/2, 1/2)
  EXPECT_EQ(layer->plan().counts, (std::vector<int>{1, 1}));
}

struct Combo {
  GateKind gate;
  float capacity_factor;  // 0: dropless
  core::FfnType ffn_type;
};

std::vector<Combo> all_combos() {
  std::vector<Combo> out;
  for (GateKind g :
       {GateKind::kGShard, GateKind::kSigmoid, GateKind::kXMoE, GateKind::kExpertChoice})
    for (float cf : {1.0f, 0.0f})
      for (core::FfnType e : {core::FfnType::kGelu, core::FfnType::kSwiglu})
        out.push_back({g, cf, e});
  return out;
}

std::string name_of(const Combo& c) {
  const char* gates[] = {"gshard", "sigmoid", "xmoe", "expert-choice"};
  return std::string(gates[static_cast<int>(c.gate)]) +
         (c.capacity_factor > 0 ? "/capacity" : "/dropless") +
         (c.ffn_type == core::FfnType::kGelu ? "/gelu" : "/swiglu");
}

MoeLayerSpec spec_of(const Combo& c, int experts) {
  MoeLayerSpec s;
  s.hidden = 4;
  s.ffn_hidden = 6;
  s.experts = experts;
  s.top_k = c.gate == GateKind::kSigmoid ? 1 : 2;
  s.gate = c.gate;
  s.ffn_type = c.ffn_type;
  s.capacity_factor = c.capacity_factor;
  s.expert_choice_capacity = 1.5f;
  s.xmoe_dim = 3;
  s.xmoe_temperature = 0.5f;
  s.seed = 123;
  return s;
}

TEST(MoeLayer, EqualsAPerTokenReference) {
  for (const Combo& c : all_combos()) {
    LocalExchange ex;
    auto layer = make_moe_layer(spec_of(c, 4), ex);
    const Tensor x = Tensor::randn({9, 4}, 7);
    const Tensor y = layer->forward(x);
    Tensor want({9, 4});
    const OrderPlan& p = layer->plan();
    for (int e = 0; e < 4; ++e)
      for (int r = p.offsets[static_cast<size_t>(e)]; r < p.offsets[static_cast<size_t>(e) + 1];
           ++r) {
        const int t = p.row_token[static_cast<size_t>(r)];
        if (t < 0) continue;
        ExpertCache cache;
        const Tensor out = layer->expert(e).forward(x.slice_rows(t, 1), cache);
        for (int m = 0; m < 4; ++m) want.at(t, m) += p.row_weight[static_cast<size_t>(r)] * out[m];
      }
    EXPECT_LE(max_abs_diff(y, want), 1e-6f) << name_of(c);
  }
}

TEST(MoeLayer, GradientsMatchFiniteDifferences) {
  for (const Combo& c : all_combos()) {
    SCOPED_TRACE(name_of(c));
    LocalExchange ex;
    auto layer = make_moe_layer(spec_of(c, 4), ex);
    Tensor x = Tensor::randn({6, 4}, 11);
    const Tensor r = Tensor::randn({6, 4}, 12);
    layer->forward(x);
    layer->zero_grad();
    const Tensor dx = layer->backward(r, kAuxCoef);
    auto loss = [&] {
      const Tensor y = layer->forward(x);
      return testing::dot(y, r) + kAuxCoef * static_cast<double>(layer->aux_loss());
    };
    auto signature = [&] {
      std::vector<int> sig = layer->routing().token;
      sig.insert(sig.end(), layer->routing().expert.begin(), layer->routing().expert.end());
      sig.insert(sig.end(), layer->plan().row_slot.begin(), layer->plan().row_slot.end());
      return sig;
    };
    const testing::GradCheckOptions opt{2e-3f, 2e-3f, 2e-2f};
    int checked = testing::check_gradient("dx", x, dx, loss, signature, opt);
    int total = static_cast<int>(x.size());
    for (const Param& p : layer->params()) {
      const Tensor g = *p.grad;
      checked += testing::check_gradient(p.name, *p.value, g, loss, signature, opt);
      total += static_cast<int>(p.value->size());
    }
    EXPECT_GT(2 * checked, total);
  }
}

TEST(MoeLayer, HooksRunInOrderWithTheirBuffers) {
  LocalExchange ex;
  auto layer = make_moe_layer(spec_of({GateKind::kGShard, 1.0f, core::FfnType::kGelu}, 4), ex);
  std::vector<std::pair<std::string, Tensor>> seen;
  auto record = [&](const char* name) {
    return [&seen, name](Tensor& t) { seen.emplace_back(name, t); };
  };
  MoeHooks& h = layer->hooks();
  h.before_moe_start = record("before_moe_start");
  h.before_dispatch = record("before_dispatch");
  h.after_dispatch = record("after_dispatch");
  h.before_combine = record("before_combine");
  h.after_combine = record("after_combine");
  h.before_moe_end = record("before_moe_end");
  const Tensor x = Tensor::randn({5, 4}, 3);
  const Tensor y = layer->forward(x);
  ASSERT_EQ(seen.size(), 6u);
  const char* order[] = {"before_moe_start", "before_dispatch", "after_dispatch",
                         "before_combine",   "after_combine",   "before_moe_end"};
  for (size_t i = 0; i < 6; ++i) EXPECT_EQ(seen[i].first, order[i]);
  const OrderPlan& p = layer->plan();
  EXPECT_EQ(seen[0].second.values(), x.values());
  EXPECT_EQ(seen[1].second.values(), order_rows(p, x).values());
  EXPECT_EQ(seen[2].second.values(), seen[1].second.values());  // local: identity
  EXPECT_EQ(seen[3].second.rows(), p.rows());
  EXPECT_EQ(seen[4].second.values(), seen[3].second.values());
  EXPECT_EQ(seen[5].second.values(), y.values());

  // Hooks may change buffers: halve x before the gate and double the output at the end.
  h = MoeHooks{};
  h.before_moe_start = [](Tensor& t) {
    for (float& v : t.values()) v *= 0.5f;
  };
  h.before_moe_end = [](Tensor& t) {
    for (float& v : t.values()) v *= 2.0f;
  };
  Tensor half = x;
  for (float& v : half.values()) v *= 0.5f;
  LocalExchange ex2;
  auto plain = make_moe_layer(spec_of({GateKind::kGShard, 1.0f, core::FfnType::kGelu}, 4), ex2);
  Tensor want = plain->forward(half);
  for (float& v : want.values()) v *= 2.0f;
  EXPECT_LE(max_abs_diff(layer->forward(x), want), 1e-6f);
}

TEST(MoeLayer, BadConstructionIsAnError) {
  LocalExchange ex;
  MoeLayerSpec s = spec_of({GateKind::kGShard, 1.0f, core::FfnType::kGelu}, 4);
  EXPECT_ERROR_HAS(MoeLayer(make_gate(s), nullptr, {}, 4, ex), "gate and order");
  auto layer = make_moe_layer(s, ex);
  EXPECT_ERROR_HAS(layer->backward(Tensor({2, 4}), 0.0f), "backward needs a forward");
  s.capacity_factor = -1;
  EXPECT_ERROR_HAS(make_moe_layer(s, ex), "capacity_factor");
}

// EP ranks as threads, each with its own tokens, against one process holding all experts
// run on each rank's tokens (DESIGN: the layer's math is independent of placement).
// With chunks, the EP layers run the pipelined path (FSMoE's r, forward and backward apart).
void check_expert_parallel(const Combo& c, int ranks, int experts, int chunks_fwd = 1,
                           int chunks_bwd = 1) {
  SCOPED_TRACE(name_of(c) + " EP=" + std::to_string(ranks) + " chunks " +
               std::to_string(chunks_fwd) + "/" + std::to_string(chunks_bwd));
  const MoeLayerSpec spec = spec_of(c, experts);
  std::vector<Tensor> xs, dys;
  for (int r = 0; r < ranks; ++r) {
    xs.push_back(Tensor::randn({7 + r, 4}, 100 + static_cast<uint64_t>(r)));
    dys.push_back(Tensor::randn({7 + r, 4}, 200 + static_cast<uint64_t>(r)));
  }
  // Reference: one process; expert grads accumulate over the ranks' batches.
  LocalExchange local;
  auto ref = make_moe_layer(spec, local);
  ref->zero_grad();
  std::vector<Tensor> ref_y, ref_dx;
  std::vector<std::vector<Tensor>> ref_gate_grad;  // per rank, per gate parameter
  for (int r = 0; r < ranks; ++r) {
    ref->gate().zero_grad();
    ref_y.push_back(ref->forward(xs[static_cast<size_t>(r)]));
    ref_dx.push_back(ref->backward(dys[static_cast<size_t>(r)], kAuxCoef));
    ref_gate_grad.emplace_back();
    for (const Param& p : ref->gate().params()) ref_gate_grad.back().push_back(*p.grad);
  }
  testing::ExchangeBoard board(ranks);
  std::vector<Tensor> y(static_cast<size_t>(ranks)), dx(static_cast<size_t>(ranks));
  std::vector<std::unique_ptr<MoeLayer>> layers(static_cast<size_t>(ranks));
  std::vector<std::unique_ptr<testing::ThreadedExchange>> exchanges;
  for (int r = 0; r < ranks; ++r)
    exchanges.push_back(std::make_unique<testing::ThreadedExchange>(board, r));
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r)
    threads.emplace_back([&, r] {
      const size_t i = static_cast<size_t>(r);
      layers[i] = make_moe_layer(spec, *exchanges[i]);
      layers[i]->set_chunks(chunks_fwd, chunks_bwd);
      layers[i]->zero_grad();
      y[i] = layers[i]->forward(xs[i]);
      dx[i] = layers[i]->backward(dys[i], kAuxCoef);
    });
  for (std::thread& t : threads) t.join();
  std::vector<Param> ref_params = ref->params();
  for (int r = 0; r < ranks; ++r) {
    const size_t i = static_cast<size_t>(r);
    EXPECT_LE(max_abs_diff(y[i], ref_y[i]), 1e-5f) << "rank " << r;
    EXPECT_LE(max_abs_diff(dx[i], ref_dx[i]), 1e-5f) << "rank " << r;
    const std::vector<Param> gate_params = layers[i]->gate().params();
    for (size_t g = 0; g < gate_params.size(); ++g)
      EXPECT_LE(max_abs_diff(*gate_params[g].grad, ref_gate_grad[i][g]), 1e-5f)
          << gate_params[g].name;
    for (const Param& p : layers[i]->params()) {
      if (p.name.rfind("gate.", 0) == 0) continue;
      for (const Param& q : ref_params) {
        if (q.name != p.name) continue;
        EXPECT_LE(max_abs_diff(*p.grad, *q.grad), 1e-5f) << p.name;
      }
    }
  }
}

TEST(MoeLayer, ExpertParallelRanksEqualOneProcess) {
  for (const Combo& c : all_combos()) {
    check_expert_parallel(c, 2, 4);
    check_expert_parallel(c, 4, 8);
  }
}

// Chunking changes when rows travel, not the math: every pipeline degree, including more
// chunks than some blocks have rows and different degrees forward and backward, gives the
// one-process layer's outputs and gradients.
TEST(MoeLayer, PipelinedChunksEqualOneProcess) {
  for (const Combo& c : all_combos()) {
    check_expert_parallel(c, 4, 8, 2, 2);
    check_expert_parallel(c, 4, 8, 3, 1);
    check_expert_parallel(c, 2, 4, 1, 4);
    check_expert_parallel(c, 2, 4, 5, 3);
  }
}

// Recomputing the experts in the backward (recompute_experts) gives the layer that keeps their
// activations bit for bit: outputs, input gradients and every parameter's gradient, whatever
// the pipeline degrees (the backward's chunks apart from the forward's recompute the
// forward's).
TEST(MoeLayer, RecomputedExpertsEqualKeptOnesBitForBit) {
  for (const Combo& c : all_combos())
    for (const auto& [fwd, bwd] : {std::pair{1, 1}, {2, 2}, {3, 1}, {1, 4}, {5, 3}}) {
      SCOPED_TRACE(name_of(c) + " chunks " + std::to_string(fwd) + "/" + std::to_string(bwd));
      MoeLayerSpec spec = spec_of(c, 4);
      spec.chunks_fwd = fwd;
      spec.chunks_bwd = bwd;
      LocalExchange ex_kept, ex_recomputed;
      auto kept = make_moe_layer(spec, ex_kept);
      spec.recompute_experts = true;
      auto recomputed = make_moe_layer(spec, ex_recomputed);
      EXPECT_FALSE(kept->recompute_experts());
      ASSERT_TRUE(recomputed->recompute_experts());
      kept->zero_grad();
      recomputed->zero_grad();
      for (uint64_t step = 0; step < 2; ++step) {  // the second step reuses the layer's state
        const Tensor x = Tensor::randn({9, 4}, 300 + step), dy = Tensor::randn({9, 4}, 400 + step);
        EXPECT_EQ(max_abs_diff(recomputed->forward(x), kept->forward(x)), 0.0f);
        // Between the passes the recomputing layer holds its experts' input rows alone; the
        // other also their hidden activations (GELU: 2, SwiGLU: 3 of ffn_hidden per row).
        const int64_t rows = kept->layout().recv_rows();
        EXPECT_EQ(recomputed->saved_floats(), rows * spec.hidden);
        EXPECT_EQ(kept->saved_floats(),
                  rows * (spec.hidden +
                          (c.ffn_type == core::FfnType::kGelu ? 2 : 3) * int64_t(spec.ffn_hidden)));
        EXPECT_EQ(max_abs_diff(recomputed->backward(dy, kAuxCoef), kept->backward(dy, kAuxCoef)),
                  0.0f);
      }
      const std::vector<Param> a = kept->params(), b = recomputed->params();
      ASSERT_EQ(a.size(), b.size());
      for (size_t p = 0; p < a.size(); ++p)
        EXPECT_EQ(max_abs_diff(*a[p].grad, *b[p].grad), 0.0f) << a[p].name;
    }
}

TEST(MoeLayer, BadChunksAreAnError) {
  LocalExchange ex;
  auto layer = make_moe_layer(spec_of({GateKind::kGShard, 1.0f, core::FfnType::kGelu}, 4), ex);
  EXPECT_ERROR_HAS(layer->set_chunks(0, 1), "chunks must be >= 1");
}

}  // namespace
}  // namespace moecomm::nn
