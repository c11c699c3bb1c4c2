#include "rt/tp_token_exchange.h"

#include <algorithm>
#include <cstddef>
#include <string>

#include "core/error.h"
#include "rt/collectives.h"
#include "rt/tp_chunk_pipeline.h"
#include "rt/tp_exchange_rows.h"

namespace moecomm::rt {
namespace {

// Streams (threads) of a chunked exchange: the ESP collectives run on the calling thread, the
// A2As beside them (MoNTA Fig. 7), the O3 copies on a third (Fig. 9).
enum Stream { kIntra = 0, kInter = 1, kCopy = 2 };

std::string str(int v) {
  return std::to_string(v);
}

void check_groups(const Comm& ep, const Comm& esp) {
  if (ep.size() == 0 || esp.size() == 0)
    throw Error("tp token exchange", "this rank is not a member of the EP or ESP communicator");
  if (ep.my_global_rank() != esp.my_global_rank())
    throw Error("tp token exchange", "the EP communicator is rank " + str(ep.my_global_rank()) +
                                         "'s but the ESP communicator is rank " +
                                         str(esp.my_global_rank()) + "'s");
  const core::RankGroup& g = esp.group();
  const int t = esp.size();
  for (int i = 0; i < t; ++i)
    if (g[static_cast<size_t>(i)] != g[0] + i || g[0] % t != 0)
      throw Error("tp token exchange", "ESP group " + group_text(g) + " must be " + str(t) +
                                           " consecutive world ranks starting at a multiple of " +
                                           str(t) +
                                           " (Megatron-Core folding: TP = ESP varies fastest)");
  for (int j = 0; j < ep.size(); ++j)
    if (ep.global_rank(j) % t != esp.rank())
      throw Error("tp token exchange",
                  "EP group " + group_text(ep.group()) + " mixes TP indices: rank " +
                      str(ep.global_rank(j)) + " has TP index " + str(ep.global_rank(j) % t) +
                      ", rank " + str(esp.my_global_rank()) + " has " + str(esp.rank()) +
                      " (the EP group is the ranks with one TP index)");
}

void check_options(const TpExchangeOptions& o) {
  if (o.chunks < 1 || o.chunks > sched::kMaxChunks)
    throw Error("tp token exchange: chunks",
                "must be in [1, " + str(sched::kMaxChunks) + "], got " + str(o.chunks));
  if (o.algorithm == sched::Algorithm::kRing)
    throw Error("tp token exchange: algorithm", "the A2A runs flat, 1dh or 2dh, not ring");
}

void check_layout(const nn::ExchangeLayout& layout, int ranks, int64_t rows, int64_t expected,
                  const char* what) {
  const size_t blocks = static_cast<size_t>(ranks) * static_cast<size_t>(layout.local_experts);
  if (layout.ranks != ranks || layout.local_experts < 1 || layout.send_counts.size() != blocks ||
      layout.recv_counts.size() != blocks)
    throw Error(what, "the layout is not this EP group's (exchange_counts makes it)");
  if (rows != expected) throw Error(what, "rows differ from counts");
}

}  // namespace

TpTokenExchange::TpTokenExchange(const Comm& ep, const Comm& esp, CallOptions call,
                                 TpExchangeOptions options)
    : ep_(ep), esp_(esp), call_(std::move(call)), options_(options), counts_(ep, call_) {
  check_groups(ep_, esp_);
  check_options(options_);
  call_.bytes = nullptr;
}

nn::ExchangeLayout TpTokenExchange::exchange_counts(const std::vector<int>& send_counts) {
  nn::ExchangeLayout layout = counts_.exchange_counts(send_counts);
  check_tp_counts(layout);
  return layout;
}

// The TP members must route identical tokens (token_exchange.h under TP): compare the
// counts sent and received, so a bad caller gets an error instead of mixed-up rows.
void TpTokenExchange::check_tp_counts(const nn::ExchangeLayout& layout) {
  if (esp_.size() == 1) return;
  std::vector<int> mine = layout.send_counts;
  mine.insert(mine.end(), layout.recv_counts.begin(), layout.recv_counts.end());
  CallOptions o = call_;
  o.label = "moe.dispatch.counts";
  const std::vector<int> all = all_gather<int>(esp_, mine, o);
  for (int u = 0; u < esp_.size(); ++u)
    if (!std::equal(mine.begin(), mine.end(),
                    all.begin() + static_cast<ptrdiff_t>(u * mine.size())))
      throw Error("tp token exchange",
                  "TP member rank " + str(esp_.global_rank(u)) +
                      " routes other expert counts than rank " + str(esp_.my_global_rank()) +
                      ": the members of a TP group must hold identical tokens");
}

CallOptions TpTokenExchange::call(const char* name, int chunk, int chunks,
                                  const StreamContext& ctx) const {
  sched::Label label;
  label.name = name;
  label.chunk = chunks > 1 ? chunk : -1;
  CallOptions o = call_;
  o.label = sched::to_string(label);
  o.bytes = ctx.bytes;
  o.cancel = ctx.cancel;
  return o;
}

// One thread when nothing can overlap, or when EP and ESP share a communicator (one-rank
// groups), which two threads must not use at once.
StreamOrder TpTokenExchange::order(const std::vector<int>& stream_of, int chunks) const {
  if (chunks == 1 || ep_.handle() == esp_.handle())
    return chunk_major_order(static_cast<int>(stream_of.size()), chunks);
  return stage_major_order(stream_of, chunks);
}

nn::Tensor TpTokenExchange::dispatch(const nn::Tensor& send, const nn::ExchangeLayout& layout) {
  return dispatch_in(send, layout, options_.chunks, {&bytes_, call_.cancel});
}

nn::Tensor TpTokenExchange::combine(const nn::Tensor& expert_rows,
                                    const nn::ExchangeLayout& layout) {
  return combine_in(expert_rows, layout, options_.chunks, {&bytes_, call_.cancel});
}

// MoNTA O1-O3: A2A of this member's pieces, ESP AllGather-v, reordering copy (Fig. 8).
nn::Tensor TpTokenExchange::dispatch_in(const nn::Tensor& send, const nn::ExchangeLayout& layout,
                                        int chunks, const StreamContext& ctx) {
  check_layout(layout, ranks(), send.rows(), layout.send_rows(), "dispatch");
  const PieceSplit split{drop() ? tp_size() : 1, chunks};
  const int me = drop() ? tp_rank() : 0;
  const Blocks sb = send_blocks(layout), rb = recv_blocks(layout);
  const int64_t m = send.cols();
  nn::Tensor out({layout.recv_rows(), m});
  std::vector<std::vector<float>> slot(static_cast<size_t>(chunks));
  std::vector<StageFn> stages = {[&](int i, const StreamContext& c) {
    slot[size_t(i)] =
        all_to_all_v<float>(ep_, gather_floats(send, piece_rows(sb, me, i, split)),
                            times(member_rows(sb, layout.local_experts, me, i, split), m),
                            options_.algorithm, call("moe.dispatch.a2a", i, chunks, c),
                            times(member_rows(rb, layout.local_experts, me, i, split), m))
            .data;
  }};
  std::vector<int> stream_of = {kInter};
  if (drop()) {
    stages.push_back([&](int i, const StreamContext& c) {
      slot[size_t(i)] =
          all_gather_v<float>(esp_, slot[size_t(i)], times(all_part_rows(rb, i, split).per_part, m),
                              call("moe.dispatch.esp_allgather", i, chunks, c));
    });
    stream_of.push_back(kIntra);
  }
  stages.push_back([&](int i, const StreamContext&) {
    scatter_floats(out, slot[size_t(i)], all_part_rows(rb, i, split).rows);
    slot[size_t(i)] = {};
  });
  stream_of.push_back(options_.copy_pipelining ? kCopy : stream_of.back());
  run_streams(stages, order(stream_of, chunks), ctx);
  return out;
}

// ESP ReduceScatter-v (drop) or AllReduce (replicate) of the partial outputs, the A2A back,
// TP AllGather-v (drop), reordering copy.
nn::Tensor TpTokenExchange::combine_in(const nn::Tensor& expert_rows,
                                       const nn::ExchangeLayout& layout, int chunks,
                                       const StreamContext& ctx) {
  check_layout(layout, ranks(), expert_rows.rows(), layout.recv_rows(), "combine");
  const PieceSplit split{drop() ? tp_size() : 1, chunks};
  const int me = drop() ? tp_rank() : 0;
  const Blocks sb = send_blocks(layout), rb = recv_blocks(layout);
  const int64_t m = expert_rows.cols();
  nn::Tensor out({layout.send_rows(), m});
  std::vector<std::vector<float>> slot(static_cast<size_t>(chunks));
  std::vector<StageFn> stages = {[&](int i, const StreamContext& c) {
    const PartRows rows = all_part_rows(rb, i, split);
    std::vector<float>& s = slot[size_t(i)];
    s = gather_floats(expert_rows, rows.rows);
    if (drop()) {
      s = reduce_scatter_v(esp_, s, times(rows.per_part, m),
                           call("moe.combine.esp_reducescatter", i, chunks, c));
    } else if (tp_size() > 1) {
      all_reduce_sum(esp_, s, call("moe.combine.esp_allreduce", i, chunks, c));
    }
  }};
  stages.push_back([&](int i, const StreamContext& c) {
    slot[size_t(i)] =
        all_to_all_v<float>(ep_, slot[size_t(i)],
                            times(member_rows(rb, layout.local_experts, me, i, split), m),
                            options_.algorithm, call("moe.combine.a2a", i, chunks, c),
                            times(member_rows(sb, layout.local_experts, me, i, split), m))
            .data;
  });
  std::vector<int> stream_of = {kIntra, kInter};
  if (drop()) {
    stages.push_back([&](int i, const StreamContext& c) {
      slot[size_t(i)] =
          all_gather_v<float>(esp_, slot[size_t(i)], times(all_part_rows(sb, i, split).per_part, m),
                              call("moe.combine.tp_allgather", i, chunks, c));
    });
    stream_of.push_back(kIntra);
  }
  stages.push_back([&](int i, const StreamContext&) {
    scatter_floats(out, slot[size_t(i)], all_part_rows(sb, i, split).rows);
    slot[size_t(i)] = {};
  });
  stream_of.push_back(options_.copy_pipelining ? kCopy : stream_of.back());
  run_streams(stages, order(stream_of, chunks), ctx);
  return out;
}

nn::Tensor TpTokenExchange::pipeline(const nn::Tensor& send, const nn::ExchangeLayout& layout,
                                     int chunks, const ChunkExperts& experts) {
  const auto dispatch = [this](const nn::Tensor& rows, const nn::ExchangeLayout& cl,
                               const StreamContext& ctx) { return dispatch_in(rows, cl, 1, ctx); };
  const auto combine = [this](const nn::Tensor& rows, const nn::ExchangeLayout& cl,
                              const StreamContext& ctx) { return combine_in(rows, cl, 1, ctx); };
  return pipeline_chunks(send, layout, chunks, experts, dispatch, combine, {&bytes_, call_.cancel});
}

}  // namespace moecomm::rt
