#pragma once
// The vocabulary of the schedule IR (DESIGN.md "One schedule, three executors"): op kinds,
// collective algorithms, labels with their typed roles, and the per-op and per-collective
// records. The simulator, the MPI runtime and moecomm.torch all read these, so a measured run
// and its prediction line up op by op.
#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"
#include "core/rank_groups.h"
#include "sched/op_role.h"

namespace moecomm::sched {

using OpId = int32_t;          // index into Schedule::op()
using CollectiveId = int32_t;  // index into Schedule::collective()
inline constexpr int32_t kNone = -1;

enum class OpKind : uint8_t {
  kCompute,  // flops and memory bytes on the rank's device
  kCopy,     // device-local memcpy (MoNTA O3 copy pipelining)
  kSend,     // point to point; matched with a kRecv on the peer
  kRecv,
  kAllToAll,   // A2A-v: per-pair byte matrix over the group
  kAllGather,  // the collectives over a rank group
  kReduceScatter,
  kAllReduce,
  kBroadcast,
};
inline constexpr int kNumOpKinds = 9;

// How a collective becomes flows. kDefault is resolved when the collective is declared:
// A2A -> kFlat; AllGather, ReduceScatter, AllReduce, Broadcast -> kRing. The A2A algorithms'
// names and routing plans are in sched/a2a_routing.h.
enum class Algorithm : uint8_t { kDefault, kFlat, k1DH, k2DH, kRing, kPairwise, kDedup };
// Which way an A2A moves tokens, for plans that are not symmetric (dedup): kDispatch sends each
// token to the experts that chose it (the forward dispatch, the backward combine), kCombine
// brings their outputs back (the forward combine, the backward dispatch).
enum class A2ADirection : uint8_t { kDispatch, kCombine };

enum class Phase : uint8_t { kNone, kForward, kBackward };

std::string_view to_string(OpKind kind);
std::string_view to_string(Algorithm algorithm);
std::string_view to_string(Phase phase);
bool is_collective(OpKind kind);
// Whether `algorithm` (already resolved) describes how `kind` runs.
bool algorithm_applies(OpKind kind, Algorithm algorithm);

// What an op belongs to, so traces and op-by-op comparisons can group it. Interned by the
// schedule: ops of one collective or one builder step share one stored label.
struct Label {
  OpRole role = OpRole::kAttention;
  int layer = -1;  // -1: not tied to a layer
  Phase phase = Phase::kNone;
  int chunk = -1;    // pipelining chunk (MoNTA O2, FSMoE r); -1: unchunked
  std::string knob;  // the Strategy knob that built it, e.g. "lina"
  // The micro-batch it belongs to; -1: not tied to one (gradient sync, optimizer) or the step
  // has one micro-batch.
  int micro_batch = -1;
  std::string_view name() const { return to_string(role); }  // "moe.dispatch.a2a"
  bool operator==(const Label&) const = default;
};
// "moe.dispatch.a2a [layer 0, forward, chunk 1, knob fsmoe, micro-batch 2]"; only the fields that
// are set.
std::string to_string(const Label& label);
struct LabelHash {
  size_t operator()(const Label& label) const;
};

// One op on one rank. Group membership and pair matrices live in the Collective, once,
// so an op costs a few words whatever its group size (thousands of ranks x tens of ops).
struct Op {
  double flops = 0;  // kCompute
  // kCompute: memory bytes; kCopy: bytes copied; kSend/kRecv: payload; AllGather,
  // ReduceScatter, AllReduce, Broadcast: the buffer size S of the collective; A2A: the bytes
  // this rank sends to other members (its pair-matrix row without the diagonal; dedup: its
  // node_bytes row, the hops it sends its own rows on, not the rows it forwards).
  double bytes = 0;
  int32_t rank = 0;
  int32_t stream = 0;
  int32_t priority = 0;       // higher first on the network
  int32_t label = 0;          // index into Schedule::label()
  OpId prev = kNone;          // the op before it on the same (rank, stream)
  int32_t first_dep = kNone;  // head of its dependency list in the schedule's pool
  CollectiveId collective = kNone;
  int32_t member = kNone;  // collective ops: position of `rank` in the group
  int32_t peer = kNone;    // kSend/kRecv: the other rank
  int32_t tag = 0;         // kSend/kRecv
  OpId twin = kNone;       // kSend/kRecv: the matching op on the peer
  OpKind kind = OpKind::kCompute;
};

// How a collective's payload is encoded on the wire, set by the builder that emits it so every
// executor encodes it alike; the collective's bytes are already the encoded bytes.
struct WireCodec {
  core::Dtype dtype = core::Dtype::kFp32;  // element type as it travels (model dtype_bytes)
  // HybridEP SR (Sec. IV-B): encoded bytes per dense byte; 1 sends the payload as it is, below
  // 1 the top-k residual against a reference (nn/sr_codec.h).
  double compression = 1;
  bool shared_reference = false;  // SR: residuals against the shared expert (w/ S), else zero
  bool error_feedback = false;    // SR: receivers keep the residual sent so far (ours)
  bool operator==(const WireCodec&) const = default;
};

// What a builder says about a collective. Every member runs the same one.
struct CollectiveSpec {
  OpKind kind = OpKind::kAllReduce;
  core::RankGroup group;           // global ranks; member i is group[i]
  double bytes = 0;                // buffer size S (not A2A): AG output, RS input, AR/Bcast buffer
  std::vector<double> pair_bytes;  // A2A only: n x n row-major, [i * n + j]: member i -> j
  // a2a=dedup only (n x n, row-major): [i * n + j], what member i sends member j itself in the
  // dispatch: to the members of its node, its tokens once per member holding one of their
  // experts; to another node, its tokens once per node, all to its counterpart there (the
  // member of i's local index), 0 to the rest. The combine's is the transpose: the hop that
  // brings the outputs home. pair_bytes then count a token once per member, not per expert.
  std::vector<double> node_bytes = {};
  A2ADirection direction = A2ADirection::kDispatch;
  Algorithm algorithm = Algorithm::kDefault;
  int root = kNone;  // Broadcast: the global rank that holds the data
  Label label;
  int priority = 0;
  WireCodec codec = {};
};

// A declared collective: its spec (label interned) and, per member, the op that joined.
struct Collective {
  OpKind kind = OpKind::kAllReduce;
  Algorithm algorithm = Algorithm::kDefault;
  core::RankGroup group;
  double bytes = 0;
  std::vector<double> pair_bytes;
  std::vector<double> node_bytes;  // a2a=dedup: CollectiveSpec::node_bytes
  A2ADirection direction = A2ADirection::kDispatch;
  int root = kNone;
  int32_t label = 0;
  int32_t priority = 0;
  WireCodec codec;
  std::vector<OpId> ops;  // ops[i]: group[i]'s op, kNone until it joins

  int size() const { return static_cast<int>(group.size()); }
  double pair(int from, int to) const { return pair_bytes[size_t(from) * group.size() + to]; }
};

// Per op kind, for reports (`moecomm sim --json`).
struct KindTotal {
  int64_t ops = 0;
  double flops = 0;
  double bytes = 0;  // sum of Op::bytes
};
using Totals = std::array<KindTotal, kNumOpKinds>;

}  // namespace moecomm::sched
