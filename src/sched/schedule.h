#pragma once
// The schedule IR (DESIGN.md "One schedule, three executors"): a per-rank DAG of ops that the
// simulator runs in virtual time and the MPI runtime and moecomm.torch run for real. Ops sit on (rank, stream);
// a stream runs its ops in the order they were added; events (depends) order ops of one
// rank across streams; collectives and send/recv pairs order ops across ranks.
#include <deque>
#include <map>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "core/dtype.h"
#include "sched/op.h"

namespace moecomm::sched {

class Schedule {
 public:
  // One side of a send/recv pair.
  struct Endpoint {
    int rank = 0;
    int stream = 0;
    std::vector<OpId> deps = {};
  };
  struct SendRecv {
    OpId send = kNone;
    OpId recv = kNone;
  };
  // A collective issued on all its members at once; ops[i] is group[i]'s op.
  struct Issued {
    CollectiveId id = kNone;
    std::vector<OpId> ops;
  };

  explicit Schedule(int world_size);

  // --- building. Ranks and streams ([0, 64)) are checked here (they index storage); everything
  // else (sizes, matching, membership, cycles) is checked by validate().
  OpId add_compute(int rank, int stream, double flops, double bytes, const Label& label,
                   const std::vector<OpId>& deps = {});
  OpId add_copy(int rank, int stream, double bytes, const Label& label,
                const std::vector<OpId>& deps = {});

  // A matched pair: `from` sends `bytes` to `to` with `tag`.
  SendRecv add_send_recv(const Endpoint& from, const Endpoint& to, double bytes, int tag,
                         const Label& label);
  // One side only, for per-rank builders: sends and recvs with the same (src, dst, tag) pair
  // up in the order they are added, as MPI's non-overtaking rule does.
  OpId add_send(int rank, int stream, int peer, double bytes, int tag, const Label& label,
                const std::vector<OpId>& deps = {});
  OpId add_recv(int rank, int stream, int peer, double bytes, int tag, const Label& label,
                const std::vector<OpId>& deps = {});

  // Collectives, whole-group: every member joins now, in group order. `streams` has one
  // entry (all members) or one per member; `deps` is empty or one list per member.
  Issued add_collective(CollectiveSpec spec, int stream,
                        const std::vector<std::vector<OpId>>& deps = {});
  Issued add_collective(CollectiveSpec spec, const std::vector<int>& streams,
                        const std::vector<std::vector<OpId>>& deps = {});
  // Collectives, per rank: declare once, then each member joins on its own stream, in
  // whatever order its program issues it. Members share the one stored record, so kind,
  // group, algorithm and sizes agree by construction; validate() checks that every member
  // joined exactly once and nobody else did.
  CollectiveId declare_collective(CollectiveSpec spec);
  OpId join(CollectiveId collective, int rank, int stream, const std::vector<OpId>& deps = {});

  // The dtype compute ops run in: executors price and run flops at the device's rate for it.
  void set_compute_dtype(core::Dtype dtype) { compute_dtype_ = dtype; }
  // What `stream` carries on every rank ("compute", "token comm"), as traces and timelines
  // name its rows. Builders name the streams they use; `name` must not be empty.
  void name_stream(int stream, std::string name);
  // `stream` runs on the host, not the device (NetMoE's placement solve): its compute ops do
  // not share the device with the compute of other streams.
  void mark_host_stream(int stream);
  bool host_stream(int stream) const {
    return stream >= 0 && stream < static_cast<int>(host_streams_.size()) &&
           host_streams_[size_t(stream)];
  }
  // Ops added from now on go to their stream + `offset`: a builder emits a second lane of the
  // same streams (one micro-batch beside another) with the code that emits the first.
  void set_stream_offset(int offset) { stream_offset_ = offset; }
  int stream_offset() const { return stream_offset_; }

  // `op` starts only after `on` ends (an event; both on one rank).
  void depends(OpId op, OpId on);
  void set_priority(OpId op, int priority);

  // --- reading
  int world_size() const { return world_; }
  core::Dtype compute_dtype() const { return compute_dtype_; }
  int num_ops() const { return static_cast<int>(ops_.size()); }
  const Op& op(OpId id) const { return ops_.at(id); }
  const Label& label(OpId id) const { return labels_[op(id).label]; }
  const std::vector<Label>& labels() const { return labels_; }  // indexed by Op::label
  // The rank's ops in the order added: each stream's ops appear in stream order.
  const std::vector<OpId>& ops_of(int rank) const { return ranks_.at(rank).ops; }
  std::vector<OpId> stream_ops(int rank, int stream) const;
  int num_streams(int rank) const { return static_cast<int>(ranks_.at(rank).last.size()); }
  // The name name_stream() gave `stream`, else "stream S".
  std::string stream_name(int stream) const;
  // Explicit dependencies of `id` (not its stream predecessor, which is Op::prev).
  std::vector<OpId> deps(OpId id) const;
  int num_collectives() const { return static_cast<int>(collectives_.size()); }
  const Collective& collective(CollectiveId id) const { return collectives_.at(id); }
  Totals totals() const;
  // `op 5 (rank 0, stream 1, "moe.dispatch.a2a")`, as errors and traces name ops.
  std::string describe(OpId id) const;

  // Throws moecomm::Error naming the first bad op (id, rank, label) and why.
  void validate() const;

 private:
  struct RankOps {
    std::vector<OpId> ops;
    std::vector<OpId> last;  // last op per stream
  };
  using P2PKey = std::tuple<int, int, int>;  // (src, dst, tag)

  OpId new_op(OpKind kind, int rank, int stream, const Label& label, const std::vector<OpId>& deps);
  OpId new_op(OpKind kind, int rank, int stream, int32_t label, const std::vector<OpId>& deps);
  int32_t intern(const Label& label);
  void check_id(OpId id, const char* what) const;
  OpId join_at(CollectiveId collective, int member, int rank, int stream,
               const std::vector<OpId>& deps);
  OpId add_p2p(OpKind kind, int rank, int stream, int peer, double bytes, int tag,
               const Label& label, const std::vector<OpId>& deps);

  void check_op(OpId id) const;
  void check_collective(CollectiveId id) const;
  void check_acyclic() const;
  OpId sync_rep(OpId id) const;
  std::string cycle_text(const std::vector<std::pair<OpId, OpId>>& edges,
                         const std::vector<int32_t>& cycle) const;

  int world_;
  core::Dtype compute_dtype_ = core::Dtype::kBf16;
  std::vector<std::string> stream_names_;  // by stream; empty: unnamed
  std::vector<char> host_streams_;         // by stream
  int stream_offset_ = 0;
  std::vector<Op> ops_;
  std::vector<Collective> collectives_;
  std::vector<Label> labels_;
  std::unordered_map<Label, int32_t, LabelHash> label_index_;
  struct DepLink {
    OpId on;
    int32_t next;
  };
  std::vector<DepLink> dep_pool_;  // singly linked lists, one per op (Op::first_dep)
  std::vector<RankOps> ranks_;
  std::map<P2PKey, std::deque<OpId>> unmatched_sends_, unmatched_recvs_;
};

}  // namespace moecomm::sched
