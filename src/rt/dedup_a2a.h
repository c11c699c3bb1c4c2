#pragma once
// a2a=dedup run as its routing plan says (sched/a2a_routing.h: dedup, node_block_pairs): the
// A2A's rows carry the token they belong to, so each message moves a token once. A message is
// a bundle of pair blocks (src, dst): the rows of its tokens once each, then, per pair block,
// the position of each of its rows among them and the row's scalar.
//   dispatch (broadcast): member a's block for member b is its rows for b's experts, one per
//     (token, expert); the bundle keeps one copy per token; the counterpart of a node block
//     splits it into its pair blocks and forwards them; the receiver expands them again, so
//     the result is the plain A2A-v's, bit for bit.
//   combine (reduce): member b's block for member a is its outputs for a's tokens; a bundle
//     sums them per token; the receiver sums what arrives into one row per token.
// Message sizes depend on the tokens, so each step sends its sizes first. The bytes counted
// (CallOptions::bytes) are the messages' whole; DedupSent splits them.
#include <cstdint>
#include <vector>

#include "rt/collectives.h"
#include "sched/a2a_routing.h"

namespace moecomm::rt {

// What this member sent each member over the plan's steps: rows (a token's once per message)
// and the bytes besides them (sizes, tokens, positions, headers, scalars).
struct DedupSent {
  std::vector<int64_t> rows, meta_bytes;  // per member
};

// The rows of a token A2A-v with their tokens. As sent: blocks by member; as received from a
// broadcast: blocks by source member.
struct KeyedRows {
  int64_t cols = 0;
  std::vector<float> rows;      // [sum(counts), cols]
  std::vector<int64_t> counts;  // rows per member block
  // Per row, its token: the source's token index (dispatch and combine alike); a key that
  // appears once may stand for a row of no token (capacity padding: see `tokens`).
  std::vector<int32_t> keys;
  std::vector<float> scalars;                 // per row (the gate weight, its gradient); or empty
  std::vector<std::vector<int32_t>> headers;  // per member block, ints ahead of it; or empty
  // The rows travel as bfloat16 (a2a_dtype=bf16, nn/bf16.h): each hop rounds them, the sums
  // stay fp32 between hops; the result's rows are those rounded values.
  bool bf16 = false;
  DedupSent sent = {};  // as received from a broadcast
};

// The combine's result on the source: per token its rows' sum, and every row's scalar back in
// the order this member sent the rows (blocks by member).
struct ReducedRows {
  std::vector<float> sums;      // [tokens, cols]
  std::vector<float> scalars;   // per row sent, or empty
  std::vector<int64_t> counts;  // rows per member block, as sent
  DedupSent sent = {};
};

// Dispatch: `send` blocks by destination member. Returns the rows, keys, scalars and headers
// received, blocks by source member (expanded: one row per row sent).
KeyedRows dedup_broadcast(const Comm& comm, const KeyedRows& send, const sched::A2ARouting& plan,
                          const CallOptions& options);

// Combine: `send` blocks by destination member, keys that member's tokens. `tokens`: this
// member's tokens; rows whose key is `tokens` or more are dropped (padding).
ReducedRows dedup_reduce(const Comm& comm, const KeyedRows& send, int64_t tokens,
                         const sched::A2ARouting& plan, const CallOptions& options);

}  // namespace moecomm::rt
