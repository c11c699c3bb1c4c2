#pragma once
// Which rows of an exchange's blocks travel in one step of the token path under tensor
// parallelism. MoNTA's Drop (O1, Fig. 5) gives TP member u part u of
// every block (chunk u of `parts`, exchange_chunks.h, so every rank derives the same split
// from the full count); O2 splits each part further into `chunks` chunks. Piece (u, i) is
// chunk i of part u: the pieces of a block are disjoint and cover it, so each row lands where
// the unsplit exchange puts it and results do not depend on the split.
#include <cstdint>
#include <span>
#include <vector>

#include "nn/token_exchange.h"

namespace moecomm::rt {

struct PieceSplit {
  int parts = 1;   // TP members sharing the rows (1: replicate, nothing dropped)
  int chunks = 1;  // MoNTA O2's N
};

// Rows [first, first + rows) of a block of `rows` rows: piece (part, chunk).
struct RowRange {
  int first = 0;
  int rows = 0;
};
RowRange piece_of(int rows, int part, int chunk, const PieceSplit& split);

// Blocks of a buffer in visiting order: their row counts and first rows.
struct Blocks {
  std::vector<int> rows;
  std::vector<int> first;
};
// The send buffer's expert blocks e = 0..E-1 (token_exchange.h: destination-major).
Blocks send_blocks(const nn::ExchangeLayout& layout);
// The dispatched buffer's (src, l) blocks in source-major order (as A2A-v delivers them),
// with their first rows in the local-expert-major buffer.
Blocks recv_blocks(const nn::ExchangeLayout& layout);

// Piece (part, chunk) of every block, block after block: row indices into the buffer.
std::vector<int> piece_rows(const Blocks& blocks, int part, int chunk, const PieceSplit& split);
// Rows of piece (part, chunk) per member when `per_member` consecutive blocks go to one
// member (A2A-v counts over EP).
std::vector<int64_t> member_rows(const Blocks& blocks, int per_member, int part, int chunk,
                                 const PieceSplit& split);

// Chunk i's pieces of every part, part-major: what an AllGather-v over the TP group
// delivers and what a ReduceScatter-v takes; per_part[u] rows come from / go to member u.
struct PartRows {
  std::vector<int> rows;
  std::vector<int64_t> per_part;
};
PartRows all_part_rows(const Blocks& blocks, int chunk, const PieceSplit& split);

// Rows `rows` of m, back to back, and the reverse (m's rows[r] = data's row r).
std::vector<float> gather_floats(const nn::Tensor& m, const std::vector<int>& rows);
void scatter_floats(nn::Tensor& m, std::span<const float> data, const std::vector<int>& rows);

// Row counts as float counts of rows of `cols` floats.
std::vector<int64_t> times(std::vector<int64_t> rows, int64_t cols);

}  // namespace moecomm::rt
