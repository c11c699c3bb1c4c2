#include "rt/train_report.h"

#include <algorithm>

#include "core/rank_groups.h"
#include "rt/mpi_base.h"

namespace moecomm::rt {

int world_size() {
  int n = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}

int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

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
void record(const nn::MoeLayer& layer, int batch, int seq_len, int world, int tp, int me,
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
  out = place::LayerRouting(batch * world / tp, seq_len, k);
  for (size_t i = 0; i < all.size(); ++i) {
    const int t = static_cast<int>(i / k), sample = t / seq_len;
    const int rank = sample / batch;
    if (rank % tp != 0) continue;
    out.at(rank / tp * batch + sample % batch, t % seq_len, static_cast<int>(i % k)) = all[i];
  }
}

void gather_samples(const nn::MoeTransformer& model, const TrainGroups& g, bool moved, int batch,
                    int world, TrainResult& out) {
  const std::vector<float> loss = model.sample_lm_losses();
  std::vector<int> ids;
  for (size_t b = 0; b < loss.size(); ++b) {
    const int id = model.sample_ids()[b];
    ids.push_back(moved ? g.ep[static_cast<size_t>(id / batch)] * batch + id % batch
                        : g.data_rank * batch + static_cast<int>(b));
  }
  const int n = static_cast<int>(loss.size());
  std::vector<float> all_loss(static_cast<size_t>(n * world));
  std::vector<int> all_ids(static_cast<size_t>(n * world));
  MPI_Allgather(loss.data(), n, MPI_FLOAT, all_loss.data(), n, MPI_FLOAT, MPI_COMM_WORLD);
  MPI_Allgather(ids.data(), n, MPI_INT, all_ids.data(), n, MPI_INT, MPI_COMM_WORLD);
  const int samples = *std::max_element(all_ids.begin(), all_ids.end()) + 1;
  out.sample_losses.assign(static_cast<size_t>(samples), 0.0f);
  out.sample_rank.assign(static_cast<size_t>(samples), -1);
  for (size_t i = 0; i < all_ids.size(); ++i) {
    out.sample_losses[static_cast<size_t>(all_ids[i])] = all_loss[i];
    out.sample_rank[static_cast<size_t>(all_ids[i])] = static_cast<int>(i) / n;
  }
}

StepReport step_report(int step, float loss, float lm_loss, double ms, const LinkBytes& token,
                       const LinkBytes& grad, const GradSyncStats& stats, int world) {
  StepReport r;
  r.step = step;
  float sums[2] = {loss, lm_loss};
  MPI_Allreduce(MPI_IN_PLACE, sums, 2, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  r.loss = sums[0] / world;
  r.lm_loss = sums[1] / world;
  MPI_Allreduce(&ms, &r.step_ms, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  MPI_Allreduce(token.bytes.data(), r.a2a.bytes.data(), kNumLinkLevels, MPI_INT64_T, MPI_SUM,
                MPI_COMM_WORLD);
  MPI_Allreduce(grad.bytes.data(), r.grad.bytes.data(), kNumLinkLevels, MPI_INT64_T, MPI_SUM,
                MPI_COMM_WORLD);
  int64_t counts[3] = {stats.micro_ops, stats.bytes, stats.votes};
  MPI_Allreduce(MPI_IN_PLACE, counts, 3, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
  double secs[3] = {stats.allreduce_s, stats.overlap_s, stats.held_s};
  MPI_Allreduce(MPI_IN_PLACE, secs, 3, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  r.grad_sync = {counts[0], counts[1], secs[0], secs[1], secs[2], counts[2]};
  return r;
}

void add_phase_times(StepReport& r, double token_fwd_s, double token_bwd_s, double grad_s,
                     int world) {
  double s[3] = {token_fwd_s, token_bwd_s, grad_s};
  MPI_Allreduce(MPI_IN_PLACE, s, 3, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  r.token_fwd_ms = s[0] * 1e3 / world;
  r.token_bwd_ms = s[1] * 1e3 / world;
  r.grad_sync_ms = s[2] * 1e3 / world;
}

std::vector<std::vector<double>> ep_matrices(const std::vector<int64_t>& rows, int64_t layers,
                                             double row_bytes, const TrainGroups& g, int world) {
  const int n = static_cast<int>(g.ep.size());
  std::vector<double> mine(static_cast<size_t>(n), 0.0);
  for (size_t j = 0; j < rows.size() && j < mine.size(); ++j)
    mine[j] = layers > 0 ? static_cast<double>(rows[j]) * row_bytes / layers : 0.0;
  std::vector<double> all(static_cast<size_t>(n * world));
  MPI_Allgather(mine.data(), n, MPI_DOUBLE, all.data(), n, MPI_DOUBLE, MPI_COMM_WORLD);
  std::vector<std::vector<double>> out;
  for (const core::RankGroup& group : core::build_rank_groups(g.parallel).ep) {
    std::vector<double> m(static_cast<size_t>(n * n), 0.0);
    for (int i = 0; i < n; ++i)
      for (int j = 0; j < n; ++j)
        m[static_cast<size_t>(i * n + j)] = all[static_cast<size_t>(group[i] * n + j)];
    out.push_back(std::move(m));
  }
  return out;
}

}  // namespace moecomm::rt
