#pragma once
// Streams for the pipelined token paths (MoNTA O2/O3 Figs. 7 and 9, FSMoE Fig. 3d): each
// stream is a thread that runs its steps in order, and step (stage s, chunk i) waits for step
// (s - 1, i) wherever that ran, as the schedule's events do (DESIGN.md "One schedule, two
// executors"). Callers put each communicator on one stream only (EP A2As on the inter-node
// stream, ESP collectives on the intra-node one), so no two threads share a communicator.
//
// The first failure sets the run's cancel flag: every other stream's waits, collectives
// included (StreamContext::cancel goes into CallOptions::cancel), throw Cancelled instead of
// hanging; run_streams joins every thread and rethrows the first failure.
#include <atomic>
#include <functional>
#include <vector>

#include "rt/link_bytes.h"

namespace moecomm::rt {

// What a step gets: where to add the bytes it sends, and the flag for CallOptions::cancel.
struct StreamContext {
  LinkBytes* bytes = nullptr;
  const std::atomic<bool>* cancel = nullptr;
};

using StageFn = std::function<void(int chunk, const StreamContext& ctx)>;

struct Step {
  int stage = 0;
  int chunk = 0;
};
using StreamOrder = std::vector<std::vector<Step>>;  // steps per stream, in order

// Stage s on stream stream_of[s]; a stream runs its stages' steps stage-major, except that
// consecutive stages on one stream run together chunk by chunk (e.g. an AllGather and its
// copy, MoNTA O2). Gives the MoNTA orders: A2A stream A2A_0..A2A_{N-1}; intra-node stream
// RS_0..RS_{N-1} then AG_0, copy_0, AG_1, ... Streams without steps are dropped.
StreamOrder stage_major_order(const std::vector<int>& stream_of, int chunks);
// Everything on one stream, chunk after chunk.
StreamOrder chunk_major_order(int stages, int chunks);

// Runs the steps: stream 0 on the calling thread, the others on their own threads; one
// stream runs inline with `outer` as its context. Every stream's bytes are added to
// *outer.bytes; outer.cancel, when set, also cancels the run (at its waits between steps).
void run_streams(const std::vector<StageFn>& stages, const StreamOrder& order,
                 const StreamContext& outer);

}  // namespace moecomm::rt
