#pragma once
// A TokenExchange for tests: EP ranks as threads of one process, meeting at a barrier, that
// follows token_exchange.h's contract the way an MPI A2A-v implementation would (send
// blocks destination-major, receive source-major, then source_to_expert_major).
#include <barrier>
#include <vector>

#include "nn/exchange_permute.h"
#include "nn/token_exchange.h"

namespace moecomm::nn::testing {

struct ExchangeBoard {
  explicit ExchangeBoard(int ranks)
      : ranks(ranks),
        sync(ranks),
        counts(static_cast<size_t>(ranks)),
        layouts(static_cast<size_t>(ranks)),
        buffers(static_cast<size_t>(ranks)) {}
  int ranks;
  std::barrier<> sync;
  std::vector<std::vector<int>> counts;
  std::vector<ExchangeLayout> layouts;
  std::vector<Tensor> buffers;
};

class ThreadedExchange : public TokenExchange {
 public:
  ThreadedExchange(ExchangeBoard& board, int rank) : board_(board), rank_(rank) {}
  int ranks() const override { return board_.ranks; }
  int rank() const override { return rank_; }

  ExchangeLayout exchange_counts(const std::vector<int>& send_counts) override {
    const int P = board_.ranks, L = static_cast<int>(send_counts.size()) / P;
    board_.counts[static_cast<size_t>(rank_)] = send_counts;
    board_.sync.arrive_and_wait();
    ExchangeLayout layout{P, L, send_counts, std::vector<int>(send_counts.size())};
    for (int src = 0; src < P; ++src)
      for (int l = 0; l < L; ++l)
        layout.recv_counts[static_cast<size_t>(src * L + l)] =
            board_.counts[static_cast<size_t>(src)][static_cast<size_t>(rank_ * L + l)];
    board_.layouts[static_cast<size_t>(rank_)] = layout;
    board_.sync.arrive_and_wait();
    return layout;
  }

  // Each call posts its layout too: a pipelined layer exchanges chunks with their own counts.
  Tensor dispatch(const Tensor& send, const ExchangeLayout& layout) override {
    post(send, layout);
    Tensor recv({layout.recv_rows(), send.cols()});
    int at = 0;
    for (int src = 0; src < board_.ranks; ++src) {  // A2A-v: source-major
      const ExchangeLayout& s = board_.layouts[static_cast<size_t>(src)];
      const int first = block_start(s.send_counts, rank_ * s.local_experts);
      const int n = block_start(s.send_counts, (rank_ + 1) * s.local_experts) - first;
      recv.set_rows(at, board_.buffers[static_cast<size_t>(src)].slice_rows(first, n));
      at += n;
    }
    board_.sync.arrive_and_wait();
    return source_to_expert_major(recv, layout);
  }

  Tensor combine(const Tensor& expert_rows, const ExchangeLayout& layout) override {
    post(expert_to_source_major(expert_rows, layout), layout);
    Tensor back({layout.send_rows(), expert_rows.cols()});
    for (int dst = 0; dst < board_.ranks; ++dst) {
      const ExchangeLayout& d = board_.layouts[static_cast<size_t>(dst)];
      const int first = block_start(d.recv_counts, rank_ * d.local_experts);
      const int n = block_start(d.recv_counts, (rank_ + 1) * d.local_experts) - first;
      back.set_rows(block_start(layout.send_counts, dst * layout.local_experts),
                    board_.buffers[static_cast<size_t>(dst)].slice_rows(first, n));
    }
    board_.sync.arrive_and_wait();
    return back;
  }

 private:
  void post(const Tensor& t, const ExchangeLayout& layout) {
    board_.buffers[static_cast<size_t>(rank_)] = t;
    board_.layouts[static_cast<size_t>(rank_)] = layout;
    board_.sync.arrive_and_wait();
  }
  static int block_start(const std::vector<int>& counts, int upto) {
    int n = 0;
    for (int i = 0; i < upto; ++i) n += counts[static_cast<size_t>(i)];
    return n;
  }

  ExchangeBoard& board_;
  int rank_;
};

}  // namespace moecomm::nn::testing
