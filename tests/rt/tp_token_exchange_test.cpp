// The token path under tensor parallelism (t = 2, Megatron-Core folding): MoNTA's
// Drop + A2A + AllGather (O1), chunked (O2) and with pipelined copies (O3), and DeepSpeed's
// replicated dispatch give exactly what MpiTokenExchange gives over the EP group; the
// combine of ESP-partial expert outputs equals the combine of their sum; the dropped A2A
// carries 1/t of the bytes; pipeline() equals dispatch -> experts -> combine.
#include <gtest/gtest.h>

#include <chrono>
#include <stdexcept>
#include <thread>

#include "core/error.h"
#include "mpi_test_util.h"
#include "nn/local_exchange.h"
#include "nn/moe_layer_factory.h"
#include "rt/comm_pool.h"
#include "rt/mpi_token_exchange.h"
#include "rt/tp_token_exchange.h"

namespace moecomm::rt {
namespace {

using nn::Tensor;
using sched::TpDispatch;
using test::world_rank;
using test::world_size;

constexpr int kT = 2, kLocal = 2, kCols = 3;

// ESP groups {0,1}, {2,3}, ...; EP groups {0,2,...}, {1,3,...}; singletons for stream tests.
std::vector<CommKey> tp_keys() {
  const int n = world_size();
  std::vector<CommKey> keys;
  for (int g = 0; g < n / kT; ++g) keys.push_back({{kT * g, kT * g + 1}, 0, "esp"});
  for (int t = 0; t < kT; ++t) {
    core::RankGroup ep;
    for (int r = t; r < n; r += kT) ep.push_back(r);
    keys.push_back({ep, 0, "ep"});
  }
  for (int r = 0; r < n; ++r) keys.push_back({{r}, 0, "self"});
  keys.push_back({test::all_ranks(), 0, "world"});
  return keys;
}

class TpTokenExchangeMpi : public testing::Test {
 protected:
  TpTokenExchangeMpi() : pool_(MPI_COMM_WORLD, tp_keys()) {}
  const Comm& esp() const { return pool_.at({{group() * kT, group() * kT + 1}, 0}); }
  const Comm& ep() const {
    core::RankGroup g;
    for (int r = world_rank() % kT; r < world_size(); r += kT) g.push_back(r);
    return pool_.at({g, 0});
  }
  const Comm& self() const { return pool_.at({{world_rank()}, 0}); }
  const Comm& world() const { return pool_.at({test::all_ranks(), 0}); }
  static int group() { return world_rank() / kT; }  // the TP group, also the EP index
  static CallOptions call(int ranks_per_node = 2) {
    return {.label = "x", .timeout_s = test::kTimeout, .ranks_per_node = ranks_per_node};
  }
  static TpExchangeOptions opts(TpDispatch d, int chunks = 1, bool o3 = false) {
    return {.dispatch = d, .chunks = chunks, .copy_pipelining = o3};
  }
  // Identical on the members of a TP group. Even: every block splits evenly over t.
  std::vector<int> counts(bool even, int salt = 0) const {
    std::vector<int> c;
    for (int e = 0; e < kLocal * ep().size(); ++e) {
      const int v = group() * 3 + e * 5 + salt;
      c.push_back(even ? 2 * (v % 4) : v % 5);
    }
    return c;
  }
  static Tensor rows(const nn::ExchangeLayout& layout, bool send, uint64_t seed) {
    return Tensor::randn({send ? layout.send_rows() : layout.recv_rows(), kCols},
                         seed + 17 * static_cast<uint64_t>(group()));
  }
  // ESP-partial expert outputs of `full` (P_0 = R - noise, P_1 = noise: sum R).
  Tensor partial(const Tensor& full) const {
    const Tensor noise = Tensor::randn(full.shape(), 900 + static_cast<uint64_t>(group()));
    if (esp().rank() == 1) return noise;
    Tensor p = full;
    for (int64_t i = 0; i < p.size(); ++i) p[i] -= noise[i];
    return p;
  }

  CommPool pool_;
};

TEST_F(TpTokenExchangeMpi, DispatchEqualsTheEpExchangeInBothModes) {
  MpiTokenExchange ref(ep(), call());
  TpTokenExchange drop(ep(), esp(), call(), opts(TpDispatch::kDropAllGather));
  TpTokenExchange repl(ep(), esp(), call(), opts(TpDispatch::kReplicate));
  EXPECT_EQ(drop.ranks(), ep().size());
  EXPECT_EQ(drop.rank(), group());
  const nn::ExchangeLayout layout = ref.exchange_counts(counts(false));
  EXPECT_EQ(drop.exchange_counts(counts(false)).recv_counts, layout.recv_counts);
  EXPECT_EQ(repl.exchange_counts(counts(false)).recv_counts, layout.recv_counts);
  const Tensor send = rows(layout, true, 100);
  const Tensor expected = ref.dispatch(send, layout);
  EXPECT_EQ(drop.dispatch(send, layout).values(), expected.values());
  EXPECT_EQ(repl.dispatch(send, layout).values(), expected.values());
}

TEST_F(TpTokenExchangeMpi, CombineOfPartialOutputsEqualsCombineOfTheirSum) {
  MpiTokenExchange ref(ep(), call());
  const nn::ExchangeLayout layout = ref.exchange_counts(counts(false, 1));
  const Tensor full = rows(layout, false, 300);
  const Tensor expected = ref.combine(full, layout);
  for (TpDispatch d : {TpDispatch::kDropAllGather, TpDispatch::kReplicate}) {
    TpTokenExchange x(ep(), esp(), call(), opts(d));
    EXPECT_LE(nn::max_abs_diff(x.combine(partial(full), layout), expected), 1e-5f) << int(d);
  }
}

// MoNTA O2/O3 and the 2DH A2A move rows differently, never to other places or sums.
TEST_F(TpTokenExchangeMpi, ChunksAndCopyPipeliningGiveIdenticalResults) {
  for (TpDispatch d : {TpDispatch::kDropAllGather, TpDispatch::kReplicate}) {
    TpTokenExchange base(ep(), esp(), call(), opts(d));
    const nn::ExchangeLayout layout = base.exchange_counts(counts(false, 2));
    const Tensor send = rows(layout, true, 400), out = partial(rows(layout, false, 500));
    const Tensor dispatched = base.dispatch(send, layout), combined = base.combine(out, layout);
    for (int chunks : {1, 2, 3}) {
      for (bool o3 : {false, true}) {
        SCOPED_TRACE(testing::Message() << "mode " << int(d) << " N " << chunks << " O3 " << o3);
        TpTokenExchange x(ep(), esp(), call(), opts(d, chunks, o3));
        EXPECT_EQ(x.dispatch(send, layout).values(), dispatched.values());
        EXPECT_EQ(x.combine(out, layout).values(), combined.values());
      }
    }
    TpExchangeOptions two_dh = opts(d, 2, true);
    two_dh.algorithm = sched::Algorithm::k2DH;
    TpTokenExchange x(ep(), esp(), call(4), two_dh);
    EXPECT_EQ(x.dispatch(send, layout).values(), dispatched.values());
    EXPECT_EQ(x.combine(out, layout).values(), combined.values());
  }
}

// MoNTA Eq. 8: the dropped A2A carries I / t; the ESP collectives stay inside the node.
TEST_F(TpTokenExchangeMpi, DropSendsOneTthOfTheA2ABytesPlusIntraNodeGathers) {
  TpTokenExchange drop(ep(), esp(), call(), opts(TpDispatch::kDropAllGather, 2));
  TpTokenExchange repl(ep(), esp(), call(), opts(TpDispatch::kReplicate));
  const nn::ExchangeLayout layout = drop.exchange_counts(counts(true, 3));
  repl.exchange_counts(counts(true, 3));
  const Tensor send = rows(layout, true, 600), out = rows(layout, false, 700);
  const int64_t row = 4 * kCols;
  const int64_t recv_half = layout.recv_rows() / kT * row,
                send_half = layout.send_rows() / kT * row;
  drop.dispatch(send, layout);
  repl.dispatch(send, layout);
  const LinkBytes d = drop.bytes(), r = repl.bytes();
  EXPECT_EQ(r[LinkLevel::kIntraNode], 0);  // the EP peers sit on other nodes
  EXPECT_GT(r[LinkLevel::kInterNode], 0);
  EXPECT_EQ(2 * d[LinkLevel::kInterNode], r[LinkLevel::kInterNode]);
  EXPECT_EQ(2 * d[LinkLevel::kSameDevice], r[LinkLevel::kSameDevice]);
  EXPECT_EQ(d[LinkLevel::kIntraNode], recv_half);  // the AllGather of the A2A's half
  drop.reset_bytes();
  repl.reset_bytes();
  drop.combine(out, layout);
  repl.combine(out, layout);
  const LinkBytes dc = drop.bytes(), rc = repl.bytes();
  EXPECT_EQ(2 * dc[LinkLevel::kInterNode], rc[LinkLevel::kInterNode]);
  EXPECT_EQ(2 * dc[LinkLevel::kSameDevice], rc[LinkLevel::kSameDevice]);
  EXPECT_EQ(dc[LinkLevel::kIntraNode], recv_half + send_half);  // ReduceScatter + AllGather
  EXPECT_EQ(rc[LinkLevel::kIntraNode], 2 * recv_half);          // AllReduce (t = 2)
}

// A row-wise expert y = 2x + 1, split over the ESP members as x and x + 1.
Tensor expert(const Tensor& x, int tp_rank) {
  Tensor y = x;
  if (tp_rank == 1)
    for (float& v : y.values()) v += 1.0f;
  return y;
}

TEST_F(TpTokenExchangeMpi, PipelineEqualsDispatchExpertsCombine) {
  MpiTokenExchange ref(ep(), call());
  const nn::ExchangeLayout layout = ref.exchange_counts(counts(false, 4));
  const Tensor send = rows(layout, true, 800);
  const auto full = [](const Tensor& x) {
    Tensor y = x;
    for (float& v : y.values()) v = 2 * v + 1;
    return y;
  };
  const Tensor expected = ref.combine(full(ref.dispatch(send, layout)), layout);
  for (int chunks : {1, 2, 3}) {
    SCOPED_TRACE(testing::Message() << "chunks " << chunks);
    int calls = 0;
    const auto check = [&](int i, const nn::ExchangeLayout& cl, const Tensor& x) {
      EXPECT_EQ(i, calls++);
      EXPECT_EQ(x.rows(), cl.recv_rows());
    };
    EXPECT_EQ(ref.pipeline(send, layout, chunks,
                           [&](int i, const nn::ExchangeLayout& cl, const Tensor& x) {
                             check(i, cl, x);
                             return full(x);
                           })
                  .values(),
              expected.values());
    for (TpDispatch d : {TpDispatch::kDropAllGather, TpDispatch::kReplicate}) {
      TpTokenExchange x(ep(), esp(), call(), opts(d, 2, true));
      const int t = x.tp_rank();
      const Tensor unpipelined = x.combine(expert(x.dispatch(send, layout), t), layout);
      calls = 0;
      const Tensor got = x.pipeline(send, layout, chunks,
                                    [&](int i, const nn::ExchangeLayout& cl, const Tensor& rows) {
                                      check(i, cl, rows);
                                      return expert(rows, t);
                                    });
      EXPECT_EQ(got.values(), unpipelined.values()) << int(d);
      EXPECT_LE(nn::max_abs_diff(got, expected), 1e-5f) << int(d);
    }
  }
}

// The MoE layer with ESP-sharded experts over the exchange, forward and backward (which calls
// the same dispatch and combine), equals one process holding every full expert, for both
// modes, chunked exchanges (O2/O3) and pipelined layers (FSMoE).
TEST_F(TpTokenExchangeMpi, ShardedMoeLayerEqualsOneProcess) {
  nn::MoeLayerSpec spec;
  spec.hidden = 8;
  spec.ffn_hidden = 12;
  spec.experts = kLocal * ep().size();
  spec.seed = 7;
  const auto tokens = [](int g, uint64_t salt) { return Tensor::randn({9 + g, 8}, salt + 31 * g); };
  for (float cf : {0.0f, 1.0f}) {
    spec.capacity_factor = cf;
    nn::LocalExchange local;
    auto ref = nn::make_moe_layer(spec, local);
    const Tensor ref_y = ref->forward(tokens(group(), 100));
    const Tensor ref_dx = ref->backward(tokens(group(), 200), 0.01f);
    for (TpDispatch d : {TpDispatch::kDropAllGather, TpDispatch::kReplicate}) {
      for (int chunks : {1, 2}) {
        SCOPED_TRACE(testing::Message() << "cf " << cf << " mode " << int(d) << " N " << chunks);
        TpTokenExchange x(ep(), esp(), call(), opts(d, chunks, chunks > 1));
        nn::MoeLayerSpec sharded = spec;
        sharded.expert_shard = {esp().rank(), kT};
        sharded.chunks_fwd = chunks;
        sharded.chunks_bwd = 3 - chunks;
        auto layer = nn::make_moe_layer(sharded, x);
        EXPECT_LE(nn::max_abs_diff(layer->forward(tokens(group(), 100)), ref_y), 1e-5f);
        EXPECT_LE(nn::max_abs_diff(layer->backward(tokens(group(), 200), 0.01f), ref_dx), 1e-5f);
      }
    }
  }
}

TEST_F(TpTokenExchangeMpi, BadConfigurationsGiveClearErrors) {
  const auto message = [](const auto& make) -> std::string {
    try {
      make();
    } catch (const Error& e) {
      return e.what();
    }
    return "no error";
  };
  EXPECT_NE(message([&] { TpTokenExchange(world(), esp(), call()); }).find("mixes TP indices"),
            std::string::npos);
  EXPECT_NE(message([&] { TpTokenExchange(esp(), ep(), call()); }).find("consecutive"),
            std::string::npos);
  EXPECT_NE(message([&] {
              TpTokenExchange(ep(), esp(), call(), opts(TpDispatch::kDropAllGather, 0));
            }).find("chunks"),
            std::string::npos);
  // TP members that route differently: every ESP group sees it, nobody hangs.
  TpTokenExchange x(ep(), esp(), call());
  std::vector<int> c = counts(false);
  if (esp().rank() == 1) c[0] += 1;
  EXPECT_NE(message([&] { x.exchange_counts(c); }).find("identical tokens"), std::string::npos);
  EXPECT_NE(message([&] {
              x.dispatch(Tensor({1, kCols}), nn::ExchangeLayout{});
            }).find("layout"),
            std::string::npos);
}

// A failing stream cancels the others, even one waiting inside an MPI operation, and
// run_streams rethrows the failure instead of hanging or terminating.
TEST_F(TpTokenExchangeMpi, StreamFailurePropagatesAndCancelsWaits) {
  const Comm& me = self();
  // Chunk 0 waits for a message that never comes; chunk 1, on another stream, fails.
  const std::vector<StageFn> stages = {[&](int chunk, const StreamContext& ctx) {
    if (chunk == 1) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      throw std::runtime_error("chunk 1 failed");
    }
    int never = 0;
    MPI_Request req = MPI_REQUEST_NULL;
    MPI_Irecv(&never, 1, MPI_INT, 0, 99, me.handle(), &req);
    CallOptions o = call();
    o.cancel = ctx.cancel;
    try {
      wait_all({&req, 1}, me, "a message that never comes", o);
    } catch (...) {
      MPI_Cancel(&req);
      MPI_Wait(&req, MPI_STATUS_IGNORE);
      throw;
    }
  }};
  const StreamOrder order = {{{0, 0}}, {{0, 1}}};
  const auto start = std::chrono::steady_clock::now();
  LinkBytes bytes;
  try {
    run_streams(stages, order, {&bytes, nullptr});
    ADD_FAILURE() << "no error";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "chunk 1 failed");
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
}

}  // namespace
}  // namespace moecomm::rt
