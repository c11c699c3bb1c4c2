#include "rt/netmoe_exchange.h"

#include <algorithm>
#include <numeric>
#include <span>
#include <string>

#include "core/error.h"
#include "rt/collectives.h"
#include "rt/tp_streams.h"
#include "sched/strategy.h"

namespace moecomm::rt {
namespace {

std::vector<int64_t> widen(const std::vector<int>& v, int64_t k = 1) {
  std::vector<int64_t> out(v.begin(), v.end());
  for (int64_t& x : out) x *= k;
  return out;
}

// Pairs begin(phase) with end(phase) also when the A2A throws.
class Pending {
 public:
  Pending(A2AActivity* a, A2APhase phase) : a_(a), phase_(phase) {
    if (a_) a_->begin(phase_);
  }
  ~Pending() {
    if (a_) a_->end(phase_);
  }
  Pending(const Pending&) = delete;
  Pending& operator=(const Pending&) = delete;

 private:
  A2AActivity* a_;
  A2APhase phase_;
};

enum Stage { kSend, kWork, kRecv };

// Stream 0 (the caller): work in chunk order. Stream 1: S_0, then S_{i+1}, G_i.
StreamOrder overlapped_order(int chunks) {
  StreamOrder order(2);
  order[1].push_back({kSend, 0});
  for (int i = 0; i < chunks; ++i) {
    order[0].push_back({kWork, i});
    if (i + 1 < chunks) order[1].push_back({kSend, i + 1});
    order[1].push_back({kRecv, i});
  }
  return order;
}

}  // namespace

NetMoeExchange::NetMoeExchange(const Comm& ep, CallOptions options, int layers, int experts,
                               A2AActivity* activity)
    : ep_(ep),
      options_(std::move(options)),
      activity_(activity),
      planner_(ep.group(), options_.ranks_per_node, layers, experts) {}

nn::Tensor NetMoeExchange::rows(const nn::Tensor& send, const std::vector<int>& send_rows,
                                std::vector<int>& recv_rows, const char* label, int meta_cols) {
  const int64_t cols = send.cols();
  CallOptions o = options_;
  o.label = label;
  o.bytes = nullptr;  // counted below: the token rows apart from their metadata columns
  for (size_t j = 0; j < send_rows.size(); ++j) {
    const int to = ep_.global_rank(static_cast<int>(j));
    const int64_t row_bytes = int64_t{send_rows[j]} * 4;
    rows_.add(ep_.my_global_rank(), to, row_bytes * (cols - meta_cols), o.ranks_per_node);
    meta_.add(ep_.my_global_rank(), to, row_bytes * meta_cols, o.ranks_per_node);
  }
  if (stage_cancel_) o.cancel = stage_cancel_;
  const std::string name = label;
  const bool scatter = name.find("scatter") != std::string::npos;
  if (name == "netmoe.scatter" || name == "netmoe.gather") {
    auto& to = scatter ? scatter_rows_ : gather_rows_;
    to.resize(send_rows.size(), 0);
    for (size_t j = 0; j < send_rows.size(); ++j) to[j] += send_rows[j];
  }
  Pending pending(activity_, scatter ? A2APhase::kDispatch : A2APhase::kCombine);
  const std::vector<int64_t> known = widen(recv_rows, cols);  // empty: exchange the counts
  const Received<float> got = all_to_all_v(
      ep_, std::span<const float>(send.data(), static_cast<size_t>(send.size())),
      std::span<const int64_t>(widen(send_rows, cols)), sched::Algorithm::kFlat, o, known);
  recv_rows.clear();
  for (int64_t c : got.counts)
    recv_rows.push_back(static_cast<int>(c / std::max<int64_t>(cols, 1)));
  const int total = std::accumulate(recv_rows.begin(), recv_rows.end(), 0);
  return nn::Tensor({total, cols}, got.data);
}

std::vector<int> NetMoeExchange::ints(const std::vector<int>& send,
                                      const std::vector<int>& send_counts, const char* label,
                                      const std::vector<int>& recv_counts) {
  CallOptions o = options_;
  o.label = label;
  o.bytes = &meta_;
  if (stage_cancel_) o.cancel = stage_cancel_;
  return all_to_all_v(ep_, std::span<const int>(send), std::span<const int64_t>(widen(send_counts)),
                      sched::Algorithm::kFlat, o, std::span<const int64_t>(widen(recv_counts)))
      .data;
}

std::vector<int> NetMoeExchange::all_gather(const std::vector<int>& mine) {
  CallOptions o = options_;
  o.label = "netmoe.all_gather";
  o.bytes = &meta_;
  return rt::all_gather(ep_, std::span<const int>(mine), o);
}

// NetMoE Alg. 1 line 9: the group's counts gathered, the problem solved in background.
void NetMoeExchange::submit_placement(int layer, const std::vector<int>& samples,
                                      const std::vector<int>& counts) {
  ++scatters_;
  std::vector<int> mine(samples);
  mine.insert(mine.end(), counts.begin(), counts.end());
  placer_.submit(planner_.problem(layer, all_gather(mine), static_cast<int>(samples.size())),
                 planner_.expert_device(), planner_.grid());
  pending_layer_ = layer;
}

std::vector<int> NetMoeExchange::collect_placement(int layer) {
  if (layer != pending_layer_)
    throw Error("netmoe", "collect for layer " + std::to_string(layer) + ", submitted " +
                              std::to_string(pending_layer_));
  pending_layer_ = -1;
  place::CollectedPlacement got = placer_.collect();  // NetMoE Alg. 1 line 13
  stats_.solve_us += got.placement.solve_us;
  stats_.wait_us += got.wait_us;
  ++stats_.solves;
  return std::move(got.placement.sample_device);
}

void NetMoeExchange::set_chunks(int forward, int backward) {
  if (forward < 1 || forward > sched::kMaxChunks || backward < 1 || backward > sched::kMaxChunks)
    throw Error("netmoe", "chunks must be in [1, " + std::to_string(sched::kMaxChunks) + "]");
  chunks_fwd_ = forward;
  chunks_bwd_ = backward;
}

// The exchanges only touch the EP communicator and this object's byte counters from the
// communication thread; the work (experts) never calls into the exchange.
void NetMoeExchange::pipeline(int chunks, const ChunkStage& send, const ChunkStage& work,
                              const ChunkStage& recv) {
  if (chunks <= 1) {
    SampleExchange::pipeline(chunks, send, work, recv);
    return;
  }
  auto comm = [this](const ChunkStage& f) {
    return [this, &f](int i, const StreamContext& ctx) {
      stage_cancel_ = ctx.cancel;
      f(i);
    };
  };
  const std::vector<StageFn> stages = {comm(send), [&](int i, const StreamContext&) { work(i); },
                                       comm(recv)};
  struct Reset {  // the calling thread's later calls use options_.cancel again
    const std::atomic<bool>*& p;
    ~Reset() { p = nullptr; }
  } reset{stage_cancel_};
  run_streams(stages, overlapped_order(chunks), {nullptr, options_.cancel});
}

void NetMoeExchange::reset_stats() {
  rows_ = {};
  meta_ = {};
  stats_ = {};
}

}  // namespace moecomm::rt
