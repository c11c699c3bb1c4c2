#include "sched/schedule.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <sstream>
#include <utility>

#include "core/error.h"

namespace moecomm::sched {
namespace {

// The runtime gives each stream a thread (DESIGN.md); a cap keeps a typo from allocating.
constexpr int kMaxStreams = 64;

std::string str(int v) {
  return std::to_string(v);
}
std::string num(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}
bool is_size(double v) {
  return std::isfinite(v) && v >= 0;
}

Algorithm resolve(OpKind kind, Algorithm algorithm) {
  if (algorithm != Algorithm::kDefault) return algorithm;
  return kind == OpKind::kAllToAll ? Algorithm::kFlat : Algorithm::kRing;
}

// Bytes this member sends to the others: its pair-matrix row without the diagonal (a
// device-local copy). 0 while the matrix is malformed; validate() reports that.
double row_bytes(const Collective& c, int member) {
  const size_t n = c.group.size();
  const std::vector<double>& m = c.algorithm == Algorithm::kDedup ? c.node_bytes : c.pair_bytes;
  if (member == kNone || m.size() != n * n) return 0;
  double sum = 0;
  for (size_t j = 0; j < n; ++j)
    if (j != size_t(member)) sum += m[size_t(member) * n + j];
  return sum;
}

// Edge ids grouped by a node key per edge (compressed rows): node v's edges are
// edge[start[v] .. start[v + 1]).
struct Csr {
  std::vector<int32_t> start, edge;
  Csr(size_t nodes, const std::vector<int32_t>& key) : start(nodes + 1, 0), edge(key.size()) {
    for (int32_t k : key) ++start[k + 1];
    std::partial_sum(start.begin(), start.end(), start.begin());
    std::vector<int32_t> at(start.begin(), start.end() - 1);
    for (size_t e = 0; e < key.size(); ++e) edge[at[key[e]]++] = static_cast<int32_t>(e);
  }
};

}  // namespace

Schedule::Schedule(int world_size) : world_(world_size) {
  if (world_size <= 0)
    throw Error("schedule", "world size must be positive, got " + str(world_size));
  ranks_.resize(world_size);
}

void Schedule::name_stream(int stream, std::string name) {
  if (stream < 0 || stream >= kMaxStreams)
    throw Error("schedule", "stream " + str(stream) + " is outside [0, " + str(kMaxStreams) + ")");
  if (name.empty()) throw Error("schedule", "stream " + str(stream) + " needs a non-empty name");
  if (stream >= static_cast<int>(stream_names_.size())) stream_names_.resize(stream + 1);
  stream_names_[size_t(stream)] = std::move(name);
}

void Schedule::mark_host_stream(int stream) {
  if (stream < 0 || stream >= kMaxStreams)
    throw Error("schedule", "stream " + str(stream) + " is outside [0, " + str(kMaxStreams) + ")");
  if (stream >= static_cast<int>(host_streams_.size())) host_streams_.resize(stream + 1, 0);
  host_streams_[size_t(stream)] = 1;
}

std::string Schedule::stream_name(int stream) const {
  if (stream >= 0 && stream < static_cast<int>(stream_names_.size()) &&
      !stream_names_[size_t(stream)].empty())
    return stream_names_[size_t(stream)];
  return "stream " + str(stream);
}

int32_t Schedule::intern(const Label& label) {
  auto [it, added] = label_index_.try_emplace(label, static_cast<int32_t>(labels_.size()));
  if (added) labels_.push_back(label);
  return it->second;
}

void Schedule::check_id(OpId id, const char* what) const {
  if (id < 0 || id >= num_ops())
    throw Error("schedule", std::string(what) + " op " + str(id) + " does not exist (" +
                                str(num_ops()) + " ops so far)");
}

OpId Schedule::new_op(OpKind kind, int rank, int stream, int32_t label,
                      const std::vector<OpId>& deps) {
  stream += stream_offset_;
  const OpId id = num_ops();
  const std::string where =
      "op " + str(id) + " (rank " + str(rank) + ", \"" + std::string(labels_[label].name()) + "\")";
  if (rank < 0 || rank >= world_)
    throw Error(where, "rank " + str(rank) + " is outside [0, " + str(world_) + ")");
  if (stream < 0 || stream >= kMaxStreams)
    throw Error(where, "stream " + str(stream) + " is outside [0, " + str(kMaxStreams) + ")");
  for (OpId d : deps) check_id(d, "dependency");
  Op op;
  op.kind = kind;
  op.rank = rank;
  op.stream = stream;
  op.label = label;
  RankOps& r = ranks_[rank];
  if (stream >= static_cast<int>(r.last.size())) r.last.resize(stream + 1, kNone);
  op.prev = r.last[stream];
  r.last[stream] = id;
  r.ops.push_back(id);
  ops_.push_back(op);
  for (OpId d : deps) depends(id, d);
  return id;
}

OpId Schedule::add_compute(int rank, int stream, double flops, double bytes, const Label& label,
                           const std::vector<OpId>& deps) {
  const OpId id = new_op(OpKind::kCompute, rank, stream, intern(label), deps);
  ops_[id].flops = flops;
  ops_[id].bytes = bytes;
  return id;
}

OpId Schedule::add_copy(int rank, int stream, double bytes, const Label& label,
                        const std::vector<OpId>& deps) {
  const OpId id = new_op(OpKind::kCopy, rank, stream, intern(label), deps);
  ops_[id].bytes = bytes;
  return id;
}

OpId Schedule::add_p2p(OpKind kind, int rank, int stream, int peer, double bytes, int tag,
                       const Label& label, const std::vector<OpId>& deps) {
  const OpId id = new_op(kind, rank, stream, intern(label), deps);
  Op& op = ops_[id];
  op.peer = peer;
  op.tag = tag;
  op.bytes = bytes;
  // Pair with the oldest unmatched opposite side of the same (src, dst, tag), as MPI does.
  const bool send = kind == OpKind::kSend;
  const P2PKey key = send ? P2PKey{rank, peer, tag} : P2PKey{peer, rank, tag};
  auto& others = send ? unmatched_recvs_ : unmatched_sends_;
  auto it = others.find(key);
  if (it == others.end()) {
    (send ? unmatched_sends_ : unmatched_recvs_)[key].push_back(id);
    return id;
  }
  op.twin = it->second.front();
  ops_[op.twin].twin = id;
  it->second.pop_front();
  if (it->second.empty()) others.erase(it);
  return id;
}

OpId Schedule::add_send(int rank, int stream, int peer, double bytes, int tag, const Label& label,
                        const std::vector<OpId>& deps) {
  return add_p2p(OpKind::kSend, rank, stream, peer, bytes, tag, label, deps);
}

OpId Schedule::add_recv(int rank, int stream, int peer, double bytes, int tag, const Label& label,
                        const std::vector<OpId>& deps) {
  return add_p2p(OpKind::kRecv, rank, stream, peer, bytes, tag, label, deps);
}

Schedule::SendRecv Schedule::add_send_recv(const Endpoint& from, const Endpoint& to, double bytes,
                                           int tag, const Label& label) {
  SendRecv pair;
  pair.send = add_send(from.rank, from.stream, to.rank, bytes, tag, label, from.deps);
  pair.recv = add_recv(to.rank, to.stream, from.rank, bytes, tag, label, to.deps);
  return pair;
}

CollectiveId Schedule::declare_collective(CollectiveSpec spec) {
  const CollectiveId id = num_collectives();
  if (!is_collective(spec.kind))
    throw Error("collective " + str(id) + " (\"" + std::string(spec.label.name()) + "\")",
                "kind " + std::string(to_string(spec.kind)) + " is not a collective");
  Collective c;
  c.kind = spec.kind;
  c.algorithm = resolve(spec.kind, spec.algorithm);
  c.group = std::move(spec.group);
  c.bytes = spec.bytes;
  c.pair_bytes = std::move(spec.pair_bytes);
  c.node_bytes = std::move(spec.node_bytes);
  c.direction = spec.direction;
  c.root = spec.root;
  c.label = intern(spec.label);
  c.priority = spec.priority;
  c.codec = spec.codec;
  c.ops.assign(c.group.size(), kNone);
  collectives_.push_back(std::move(c));
  return id;
}

OpId Schedule::join(CollectiveId collective, int rank, int stream, const std::vector<OpId>& deps) {
  if (collective < 0 || collective >= num_collectives())
    throw Error("schedule", "collective " + str(collective) + " does not exist");
  const core::RankGroup& g = collectives_[collective].group;
  const auto it = std::find(g.begin(), g.end(), rank);
  const int member = it == g.end() ? kNone : static_cast<int>(it - g.begin());
  return join_at(collective, member, rank, stream, deps);
}

OpId Schedule::join_at(CollectiveId collective, int member, int rank, int stream,
                       const std::vector<OpId>& deps) {
  Collective& c = collectives_[collective];
  const OpId id = new_op(c.kind, rank, stream, c.label, deps);
  Op& op = ops_[id];
  op.collective = collective;
  op.member = member;
  op.priority = c.priority;
  op.bytes = c.kind == OpKind::kAllToAll ? row_bytes(c, member) : c.bytes;
  if (member != kNone && c.ops[member] == kNone) c.ops[member] = id;  // twice: validate()
  return id;
}

Schedule::Issued Schedule::add_collective(CollectiveSpec spec, int stream,
                                          const std::vector<std::vector<OpId>>& deps) {
  return add_collective(std::move(spec), std::vector<int>{stream}, deps);
}

Schedule::Issued Schedule::add_collective(CollectiveSpec spec, const std::vector<int>& streams,
                                          const std::vector<std::vector<OpId>>& deps) {
  const size_t n = spec.group.size();
  const std::string where = "collective " + str(num_collectives()) + " (\"" +
                            std::string(spec.label.name()) + "\" over " + std::to_string(n) +
                            " ranks)";
  if (streams.size() != 1 && streams.size() != n)
    throw Error(where, "needs 1 stream or one per member, got " + std::to_string(streams.size()));
  if (!deps.empty() && deps.size() != n)
    throw Error(where, "needs no deps or a list per member, got " + std::to_string(deps.size()));
  Issued issued;
  issued.id = declare_collective(std::move(spec));
  const core::RankGroup& g = collectives_[issued.id].group;
  issued.ops.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    const int stream = streams.size() == 1 ? streams[0] : streams[i];
    const std::vector<OpId>& d = deps.empty() ? std::vector<OpId>{} : deps[i];
    issued.ops.push_back(join_at(issued.id, static_cast<int>(i), g[i], stream, d));
  }
  return issued;
}

void Schedule::depends(OpId op, OpId on) {
  check_id(op, "dependent");
  check_id(on, "dependency");
  dep_pool_.push_back({on, ops_[op].first_dep});
  ops_[op].first_dep = static_cast<int32_t>(dep_pool_.size() - 1);
}

void Schedule::set_priority(OpId op, int priority) {
  check_id(op, "prioritized");
  ops_[op].priority = priority;
}

std::vector<OpId> Schedule::stream_ops(int rank, int stream) const {
  const RankOps& r = ranks_.at(rank);
  std::vector<OpId> out;
  if (stream < 0 || stream >= static_cast<int>(r.last.size())) return out;
  for (OpId id = r.last[stream]; id != kNone; id = ops_[id].prev) out.push_back(id);
  std::reverse(out.begin(), out.end());
  return out;
}

std::vector<OpId> Schedule::deps(OpId id) const {
  std::vector<OpId> out;
  for (int32_t l = op(id).first_dep; l != kNone; l = dep_pool_[l].next)
    out.push_back(dep_pool_[l].on);
  std::reverse(out.begin(), out.end());  // the pool prepends; give them in the order added
  return out;
}

Totals Schedule::totals() const {
  Totals t{};
  for (const Op& op : ops_) {
    KindTotal& k = t[static_cast<size_t>(op.kind)];
    ++k.ops;
    k.flops += op.flops;
    k.bytes += op.bytes;
  }
  return t;
}

std::string Schedule::describe(OpId id) const {
  const Op& o = op(id);
  return "op " + str(id) + " (rank " + str(o.rank) + ", stream " + str(o.stream) + ", \"" +
         std::string(labels_[o.label].name()) + "\")";
}

// --- validation

void Schedule::validate() const {
  for (CollectiveId c = 0; c < num_collectives(); ++c) check_collective(c);
  for (OpId id = 0; id < num_ops(); ++id) check_op(id);
  check_acyclic();
}

void Schedule::check_collective(CollectiveId id) const {
  const Collective& c = collectives_[id];
  const int n = c.size();
  const auto joined = std::find_if(c.ops.begin(), c.ops.end(), [](OpId o) { return o != kNone; });
  const std::string where = (joined == c.ops.end() ? "" : describe(*joined) + ", ") +
                            "collective " + str(id) + " (" + std::string(to_string(c.kind)) +
                            " over " + str(n) + " ranks, \"" +
                            std::string(labels_[c.label].name()) + "\")";
  auto fail = [&](const std::string& why) { throw Error(where, why); };
  if (n == 0) fail("the group is empty");
  for (int r : c.group)
    if (r < 0 || r >= world_) fail("group rank " + str(r) + " is outside [0, " + str(world_) + ")");
  core::RankGroup sorted = c.group;
  std::sort(sorted.begin(), sorted.end());
  if (auto dup = std::adjacent_find(sorted.begin(), sorted.end()); dup != sorted.end())
    fail("rank " + str(*dup) + " appears twice in the group");
  if (!algorithm_applies(c.kind, c.algorithm))
    fail("algorithm " + std::string(to_string(c.algorithm)) + " does not apply to " +
         std::string(to_string(c.kind)));
  if (c.kind != OpKind::kAllToAll && !c.pair_bytes.empty())
    fail("a pair matrix belongs to all_to_all only");
  if (c.kind == OpKind::kAllToAll && c.pair_bytes.size() != size_t(n) * n)
    fail("pair matrix has " + std::to_string(c.pair_bytes.size()) + " entries, a group of " +
         str(n) + " needs " + str(n * n));
  for (size_t k = 0; k < c.pair_bytes.size(); ++k)
    if (!is_size(c.pair_bytes[k]))
      fail("pair bytes [" + str(int(k) / n) + "][" + str(int(k) % n) +
           "] = " + num(c.pair_bytes[k]) + ", must be >= 0");
  const bool dedup = c.kind == OpKind::kAllToAll && c.algorithm == Algorithm::kDedup;
  if (!dedup && !c.node_bytes.empty()) fail("node bytes belong to a2a=dedup only");
  if (dedup && c.node_bytes.size() != size_t(n) * n)
    fail("a2a=dedup needs node bytes for a group of " + str(n) + " (" + str(n * n) +
         " entries), got " + std::to_string(c.node_bytes.size()));
  for (size_t k = 0; k < c.node_bytes.size(); ++k)
    if (!is_size(c.node_bytes[k]))
      fail("node bytes [" + str(int(k) / n) + "][" + str(int(k) % n) +
           "] = " + num(c.node_bytes[k]) + ", must be >= 0");
  if (!is_size(c.bytes)) fail("bytes = " + num(c.bytes) + ", must be >= 0");
  if (!(c.codec.compression > 0 && c.codec.compression <= 1))  // also rejects NaN
    fail("codec compression = " + num(c.codec.compression) + ", must be in (0, 1]");
  if (c.kind == OpKind::kBroadcast &&
      std::find(c.group.begin(), c.group.end(), c.root) == c.group.end())
    fail("root " + str(c.root) + " is not in the group");
  for (int i = 0; i < n; ++i)
    if (c.ops[i] == kNone) fail("group rank " + str(c.group[i]) + " has no op of this collective");
}

void Schedule::check_op(OpId id) const {
  const Op& o = ops_[id];
  auto fail = [&](const std::string& why) { throw Error(describe(id), why); };
  if (!is_size(o.flops)) fail("flops = " + num(o.flops) + ", must be >= 0");
  if (!is_size(o.bytes)) fail("bytes = " + num(o.bytes) + ", must be >= 0");
  for (int32_t l = o.first_dep; l != kNone; l = dep_pool_[l].next)
    if (ops_[dep_pool_[l].on].rank != o.rank)  // DESIGN.md: events order a rank's streams
      fail("depends on " + describe(dep_pool_[l].on) +
           " of another rank; across ranks use a collective or send/recv");
  if (o.kind == OpKind::kSend || o.kind == OpKind::kRecv) {
    const bool send = o.kind == OpKind::kSend;
    const std::string what = send ? "send to rank " : "recv from rank ";
    if (o.peer < 0 || o.peer >= world_)
      fail("peer rank " + str(o.peer) + " is outside [0, " + str(world_) + ")");
    if (o.peer == o.rank) fail(what + "itself; a device-local transfer is a copy");
    if (o.twin == kNone)
      fail(what + str(o.peer) + " (tag " + str(o.tag) + ") has no matching " +
           (send ? "recv" : "send"));
    if (ops_[o.twin].bytes != o.bytes)
      fail(what + str(o.peer) + " has " + num(o.bytes) + " bytes, its match " + describe(o.twin) +
           " has " + num(ops_[o.twin].bytes));
  }
  if (o.collective == kNone) return;
  const Collective& c = collectives_[o.collective];
  if (o.member == kNone) fail("rank is not in the group of collective " + str(o.collective));
  if (c.ops[o.member] != id)
    fail("joins collective " + str(o.collective) + " twice, first as " + describe(c.ops[o.member]));
}

// A collective's members, and a send with its recv, are one synchronization point: no member
// finishes before all have started (a blocking send waits for its recv, as large MPI messages
// do). Merged into one node, a wait across ranks is an edge, so the classic deadlock of two
// collectives issued in opposite orders on two ranks is a cycle.
OpId Schedule::sync_rep(OpId id) const {
  const Op& o = ops_[id];
  if (o.collective != kNone) return collectives_[o.collective].ops[0];  // all joined by now
  if (o.twin != kNone) return std::min(id, o.twin);
  return id;
}

void Schedule::check_acyclic() const {
  const size_t n = ops_.size();
  std::vector<std::pair<OpId, OpId>> edges;  // (before, after): stream order and events
  for (OpId i = 0; i < num_ops(); ++i) {
    if (ops_[i].prev != kNone) edges.emplace_back(ops_[i].prev, i);
    for (int32_t l = ops_[i].first_dep; l != kNone; l = dep_pool_[l].next)
      edges.emplace_back(dep_pool_[l].on, i);
  }
  std::vector<int32_t> from(edges.size()), to(edges.size());
  for (size_t e = 0; e < edges.size(); ++e) {
    from[e] = sync_rep(edges[e].first);
    to[e] = sync_rep(edges[e].second);
  }
  const Csr out(n, from), in(n, to);
  std::vector<int32_t> indeg(n, 0), ready;
  for (int32_t t : to) ++indeg[t];
  for (OpId i = 0; i < num_ops(); ++i)
    if (sync_rep(i) == i && indeg[i] == 0) ready.push_back(i);
  std::vector<char> done(n, 0);
  while (!ready.empty()) {  // Kahn: finish nodes whose predecessors all finished
    const int32_t u = ready.back();
    ready.pop_back();
    done[u] = 1;
    for (int32_t k = out.start[u]; k < out.start[u + 1]; ++k)
      if (--indeg[to[out.edge[k]]] == 0) ready.push_back(to[out.edge[k]]);
  }
  int32_t v = 0;
  while (v < num_ops() && (done[v] || sync_rep(v) != v)) ++v;
  if (v == num_ops()) return;
  // Every unfinished node waits on an unfinished one: walk back until a node repeats.
  std::vector<int32_t> path, pos(n, kNone);
  while (pos[v] == kNone) {
    pos[v] = static_cast<int32_t>(path.size());
    int32_t k = in.start[v];
    while (done[from[in.edge[k]]]) ++k;
    path.push_back(in.edge[k]);
    v = from[in.edge[k]];
  }
  std::vector<int32_t> cycle(path.rbegin(), path.rend() - pos[v]);  // forward order
  throw Error(describe(edges[cycle[0]].first),
              "is on a dependency cycle (a deadlock): " + cycle_text(edges, cycle));
}

std::string Schedule::cycle_text(const std::vector<std::pair<OpId, OpId>>& edges,
                                 const std::vector<int32_t>& cycle) const {
  constexpr size_t kShown = 8;
  std::string text = describe(edges[cycle[0]].first);
  for (size_t k = 0; k < cycle.size(); ++k) {
    if (k == kShown) return text + " -> ...";
    const OpId after = edges[cycle[k]].second;
    const OpId next = edges[cycle[(k + 1) % cycle.size()]].first;
    text += " -> " + describe(after);
    if (next != after) text += " ~ " + describe(next);
  }
  return text + " (->: stream order or event; ~: same collective or send/recv)";
}

}  // namespace moecomm::sched
