#include "rt/train_loop.h"

#include <chrono>
#include <numeric>

#include "core/error.h"
#include "nn/adam.h"
#include "nn/synthetic_text.h"
#include "rt/collectives.h"
#include "rt/comm_pool.h"
#include "rt/mpi_base.h"
#include "rt/mpi_token_exchange.h"

namespace moecomm::rt {

namespace {

int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}
int world_size() {
  int n = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}

// EP groups: consecutive ranks; expert-data-parallel groups: equal positions in them.
struct Groups {
  core::RankGroup world, ep, edp;
};

Groups groups_of(int world, int ep, int me) {
  Groups g;
  g.world.resize(static_cast<size_t>(world));
  std::iota(g.world.begin(), g.world.end(), 0);
  const int first = me / ep * ep;
  for (int r = first; r < first + ep; ++r) g.ep.push_back(r);
  for (int r = me % ep; r < world; r += ep) g.edp.push_back(r);
  return g;
}

std::vector<CommKey> comm_keys(int world, int ep) {
  std::vector<CommKey> keys{{groups_of(world, ep, 0).world, 0}};
  for (int first = 0; first < world; first += ep)
    keys.push_back({groups_of(world, ep, first).ep, 0});
  for (int pos = 0; pos < ep && world / ep > 1; ++pos)
    keys.push_back({groups_of(world, ep, pos).edp, 0});
  return keys;
}

void check(const TrainConfig& c, int world) {
  const int ep = c.ep;
  if (ep < 1 || world % ep != 0)
    throw Error("--parallel", "ep=" + std::to_string(ep) + " must divide the " +
                                  std::to_string(world) + " ranks");
  if (c.model.moe.experts % ep != 0)
    throw Error("model", std::to_string(c.model.moe.experts) +
                             " experts do not split over ep=" + std::to_string(ep));
  if (c.seq_len < 2 || c.seq_len > c.model.max_seq)
    throw Error("seq_len", "must be in [2, " + std::to_string(c.model.max_seq) + "]");
  if (c.batch < 1 || c.steps < 1) throw Error("train", "batch and steps must be >= 1");
  if (!c.corpus.empty() && static_cast<int>(c.corpus.size()) <= c.seq_len)
    throw Error("--data", "the corpus has " + std::to_string(c.corpus.size()) +
                              " tokens, fewer than a sequence of " + std::to_string(c.seq_len) +
                              " + 1");
}

// Windows of the corpus, drawn by (seed, step, rank, b).
nn::TextBatch corpus_batch(const std::vector<int>& corpus, int batch, int seq_len, uint64_t seed,
                           uint64_t step, int rank) {
  nn::TextBatch out{batch, seq_len, {}, {}};
  const uint64_t span = corpus.size() - static_cast<uint64_t>(seq_len);
  for (int b = 0; b < batch; ++b) {
    uint64_t h = seed * 0x9E3779B97F4A7C15ull ^ (step * 1315423911ull + rank * 2654435761ull + b);
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    const uint64_t start = h % span;
    for (int s = 0; s < seq_len; ++s) {
      out.tokens.push_back(corpus[start + s]);
      out.targets.push_back(corpus[start + s + 1]);
    }
  }
  return out;
}

// This rank's routing of one MoE layer as [batch][seq][k], gathered to rank 0.
void record(const nn::MoeLayer& layer, int batch, int seq_len, int world, int me,
            place::LayerRouting& out) {
  const nn::GateOutput& g = layer.routing();
  const int k = g.per_group;
  std::vector<int32_t> mine(static_cast<size_t>(batch * seq_len * k), 0);
  std::vector<int> filled(static_cast<size_t>(batch * seq_len), 0);
  for (int s = 0; s < g.slots(); ++s) {
    const int t = g.token[static_cast<size_t>(s)];
    mine[static_cast<size_t>(t * k + filled[static_cast<size_t>(t)]++)] =
        g.expert[static_cast<size_t>(s)];
  }
  std::vector<int32_t> all(me == 0 ? mine.size() * static_cast<size_t>(world) : 0);
  MPI_Gather(mine.data(), static_cast<int>(mine.size()), MPI_INT32_T, all.data(),
             static_cast<int>(mine.size()), MPI_INT32_T, 0, MPI_COMM_WORLD);
  if (me != 0) return;
  out = place::LayerRouting(batch * world, seq_len, k);
  for (size_t i = 0; i < all.size(); ++i) {
    const int t = static_cast<int>(i / k), sample = t / seq_len;
    out.at(sample, t % seq_len, static_cast<int>(i % k)) = all[i];
  }
}

void all_reduce_grads(const Comm& comm, const std::vector<nn::Param*>& params,
                      const CallOptions& options) {
  for (nn::Param* p : params) {
    all_reduce_sum(comm, std::span<float>(p->grad->data(), static_cast<size_t>(p->grad->size())),
                   options);
  }
}

}  // namespace

TrainResult train(const TrainConfig& config_in,
                  const std::function<void(const StepReport&)>& on_step) {
  const int world = world_size(), me = world_rank();
  TrainConfig c = config_in;
  if (c.ep == 0) c.ep = world;
  if (c.ranks_per_node == 0) c.ranks_per_node = world;
  check(c, world);
  const Groups g = groups_of(world, c.ep, me);
  CommPool pool(MPI_COMM_WORLD, comm_keys(world, c.ep));
  CallOptions options;
  options.timeout_s = c.timeout_s;
  options.ranks_per_node = c.ranks_per_node;
  MpiTokenExchange exchange(pool.at({g.ep, 0}), options, c.a2a, c.bf16_a2a);
  nn::MoeTransformer model(c.model, exchange);
  nn::Adam adam(model.params(), nn::AdamConfig{.lr = c.lr});
  const nn::SyntheticText text(
      nn::SyntheticTextConfig{.vocab = c.model.vocab, .seed = c.data_seed});
  TrainResult result;
  if (c.corpus.empty()) result.entropy_floor = text.entropy_floor(c.seq_len);
  const bool routing = c.record_routing && !model.moe_layers().empty() &&
                       c.model.moe.gate != nn::GateKind::kExpertChoice;
  if (routing && me == 0) {
    result.routing.experts = c.model.moe.experts;
    result.routing.top_k = c.model.moe.top_k;
  }
  for (int step = 0; step < c.steps; ++step) {
    const auto start = std::chrono::steady_clock::now();
    const nn::TextBatch batch =
        c.corpus.empty() ? text.sample(c.batch, c.seq_len, static_cast<uint64_t>(step), me)
                         : corpus_batch(c.corpus, c.batch, c.seq_len, c.data_seed, step, me);
    exchange.reset_bytes();
    adam.zero_grad();
    const float loss = model.forward(batch.tokens, batch.targets, c.seq_len);
    model.backward();
    options.label = "grad.dense.allreduce";
    all_reduce_grads(pool.at({g.world, 0}), model.dense_params(), options);
    if (g.edp.size() > 1) {
      options.label = "grad.expert.allreduce";
      all_reduce_grads(pool.at({g.edp, 0}), model.expert_params(), options);
    }
    // Mean over ranks: dense sums over the world; an expert's gradient sums every rank's
    // tokens of its EP group (A2A backward), then its edp copies.
    nn::scale_grad(model.params(), 1.0f / static_cast<float>(world));
    if (c.keep_gradients && step + 1 == c.steps) {
      for (nn::Param* p : model.params()) result.gradients.emplace_back(p->name, *p->grad);
    }
    adam.step();
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    StepReport r;
    r.step = step + 1;
    float sums[2] = {loss, model.lm_loss()};
    MPI_Allreduce(MPI_IN_PLACE, sums, 2, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    r.loss = sums[0] / world;
    r.lm_loss = sums[1] / world;
    MPI_Allreduce(&ms, &r.step_ms, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    MPI_Allreduce(exchange.bytes().bytes.data(), r.a2a.bytes.data(), kNumLinkLevels, MPI_INT64_T,
                  MPI_SUM, MPI_COMM_WORLD);
    if (routing) {
      std::vector<place::LayerRouting> layers;
      for (nn::MoeLayer* layer : model.moe_layers()) {
        layers.emplace_back();
        record(*layer, c.batch, c.seq_len, world, me, layers.back());
      }
      if (me == 0) result.routing.iterations.push_back(std::move(layers));
    }
    result.steps.push_back(r);
    if (me == 0 && on_step) on_step(r);
  }
  return result;
}

}  // namespace moecomm::rt
