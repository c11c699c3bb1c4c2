#pragma once
// Exact solver for NetMoE's assignment (Eq. 10 and its stage-2 twin) that exploits the few
// bins (N nodes, or the J/N devices of a node) instead of duplicating them into an I x I
// matrix as Kuhn-Munkres does. It is successive shortest paths on the transportation
// network rows -> bins -> sink, where the residual graph is contracted onto the bins: an arc
// a -> b means "move some row from bin a to bin b", and its cost is the cheapest such move,
// kept in one lazy min-heap per ordered bin pair. Rows are inserted one at a time; each
// insertion is one Dijkstra over B + 1 nodes with Johnson potentials, so a solve is
// O(I (B^2 + moves * B log I)) instead of O(I^3).
#include <vector>

#include "place/assignment.h"

namespace moecomm::place {

class FewSinksSolver final : public AssignmentSolver {
 public:
  std::string_view name() const override { return "flow"; }
  Assignment solve(const AssignmentProblem& problem) override;

 private:
  struct Move {  // row `row` can move between two bins at cost `cost` (key of the heap)
    int64_t cost;
    int row;
    bool operator>(const Move& o) const { return cost > o.cost; }
  };

  void reset(const AssignmentProblem& problem);
  void insert(int row);
  void shortest_paths(int row);
  void place(int row, int bin);
  // Cheapest valid move out of bin a into bin b, dropping stale entries; false if none.
  bool top_move(int a, int b, Move& move);

  const AssignmentProblem* problem_ = nullptr;
  int bins_ = 0;
  std::vector<int> bin_of_, used_;
  std::vector<std::vector<Move>> moves_;  // bins x bins heaps
  std::vector<int64_t> potential_;        // bins, then the sink at index bins_
  // Per Dijkstra: reduced distance, predecessor bin (-1: the new row; bins_: the sink) and
  // the row moved along the arc into each node.
  std::vector<int64_t> dist_;
  std::vector<int> pred_, pred_row_;
  std::vector<char> done_;
};

}  // namespace moecomm::place
