#include "place/few_sinks_solver.h"

#include <algorithm>
#include <functional>
#include <limits>

namespace moecomm::place {

namespace {
constexpr int64_t kInf = std::numeric_limits<int64_t>::max() / 4;
}

Assignment FewSinksSolver::solve(const AssignmentProblem& problem) {
  check(problem);
  reset(problem);
  for (int r = 0; r < problem.rows; ++r) insert(r);
  Assignment result;
  result.bin_of = bin_of_;
  result.cost = assignment_cost(problem, result.bin_of);
  problem_ = nullptr;
  return result;
}

void FewSinksSolver::reset(const AssignmentProblem& problem) {
  problem_ = &problem;
  bins_ = problem.bins;
  bin_of_.assign(problem.rows, -1);
  used_.assign(bins_, 0);
  moves_.resize(static_cast<size_t>(bins_) * bins_);
  for (auto& heap : moves_) heap.clear();  // keep the capacity across solves
  // Zero potentials are feasible at the start: no rows placed, so no bin -> bin arcs, and
  // every bin -> sink arc costs 0.
  potential_.assign(bins_ + 1, 0);
  dist_.assign(bins_ + 1, kInf);
  pred_.assign(bins_ + 1, -1);
  pred_row_.assign(bins_ + 1, -1);
  done_.assign(bins_ + 1, 0);
}

bool FewSinksSolver::top_move(int a, int b, Move& move) {
  auto& heap = moves_[static_cast<size_t>(a) * bins_ + b];
  while (!heap.empty() && bin_of_[heap.front().row] != a) {
    std::pop_heap(heap.begin(), heap.end(), std::greater<>{});
    heap.pop_back();
  }
  if (heap.empty()) return false;
  move = heap.front();
  return true;
}

// Dijkstra from the new row over bins and the sink, on reduced costs (all >= 0 by the
// potentials), stopped once the sink is settled. Arcs: row -> b (cost c[row][b]); a -> b via the
// cheapest row in a; b -> sink while b has room; sink -> b while b holds rows (undoing a unit of
// b's flow).
void FewSinksSolver::shortest_paths(int row) {
  const int sink = bins_;
  std::fill(done_.begin(), done_.end(), 0);
  for (int b = 0; b < bins_; ++b) {
    dist_[b] = problem_->at(row, b) - potential_[b];
    pred_[b] = -1;
  }
  dist_[sink] = kInf;
  for (int step = 0; step <= bins_; ++step) {
    int x = -1;
    for (int y = 0; y <= bins_; ++y) {
      if (!done_[y] && (x < 0 || dist_[y] < dist_[x])) x = y;
    }
    if (dist_[x] >= kInf) break;
    done_[x] = 1;
    if (x == sink) break;  // the rest only matters for potentials, capped below
    for (int y = 0; y <= bins_; ++y) {
      if (done_[y] || y == x) continue;
      int64_t arc;
      int via = -1;
      if (x == sink) {
        if (used_[y] == 0) continue;
        arc = 0;
      } else if (y == sink) {
        if (used_[x] == problem_->capacity[x]) continue;
        arc = 0;
      } else {
        Move m;
        if (!top_move(x, y, m)) continue;
        arc = m.cost;
        via = m.row;
      }
      const int64_t d = dist_[x] + arc + potential_[x] - potential_[y];
      if (d < dist_[y]) {
        dist_[y] = d;
        pred_[y] = x;
        pred_row_[y] = via;
      }
    }
  }
}

void FewSinksSolver::place(int row, int bin) {
  bin_of_[row] = bin;
  for (int b = 0; b < bins_; ++b) {
    if (b == bin) continue;
    auto& heap = moves_[static_cast<size_t>(bin) * bins_ + b];
    heap.push_back({problem_->at(row, b) - problem_->at(row, bin), row});
    std::push_heap(heap.begin(), heap.end(), std::greater<>{});
  }
}

void FewSinksSolver::insert(int row) {
  shortest_paths(row);
  const int sink = bins_;
  // Walk back from the sink: the last bin gains a row; each bin -> bin arc moves its row.
  int y = pred_[sink];
  ++used_[y];
  while (pred_[y] != -1) {
    const int x = pred_[y];
    place(pred_row_[y], y);
    y = x;
  }
  place(row, y);
  // Johnson update, capped at the sink's distance for nodes Dijkstra did not settle (as in
  // Jonker-Volgenant): reduced costs stay >= 0 and those on the path become 0.
  for (int v = 0; v <= bins_; ++v) potential_[v] += done_[v] ? dist_[v] : dist_[sink];
}

}  // namespace moecomm::place
