#include "sim/simulator.h"

#include <algorithm>
#include <limits>
#include <map>
#include <optional>
#include <queue>
#include <string>
#include <tuple>
#include <unordered_map>
#include <utility>

#include "core/error.h"
#include "cost/collective_model.h"
#include "sched/policy.h"
#include "sim/collective_flows.h"
#include "sim/flow_network.h"
#include "sim/network_model.h"

namespace moecomm::sim {

namespace {

using sched::CollectiveId;
using sched::OpId;
using sched::OpKind;
constexpr double kInf = std::numeric_limits<double>::infinity();

// One discrete-event run. Ops become ready when their stream predecessor and events are
// done; a collective starts when all members are ready, runs its phases of flows, and ends on
// every member at once. Send/recv is one flow between ready ends. Lina's gate as
// sched/policy.h describes it: a micro-op (yields_to_traffic) starts only while no collective
// that waits for micro-ops is pending (a member waits in it) or running on its ranks, and such
// a collective starts only while no micro-op runs on its ranks.
class Run {
 public:
  Run(const sched::Schedule& s, const core::Topology& topo, const SimOptions& options)
      : s_(s),
        topo_(topo),
        options_(options),
        net_(options.completion_tolerance),
        model_(topo, net_),
        curves_(topo),
        link_bytes_(net_.num_links(), 0.0) {
    devices_per_node_ = topo.level(topo.num_levels() - 1).count;
    overlapped_share_ = topo.cluster().device.overlapped_compute_share;
  }

  SimResult run();

 private:
  struct Event {
    double time;
    int64_t seq;
    int kind;  // 0: op ends, 2: a ring's delayed flow launches
    int id;
    bool operator>(const Event& o) const { return time != o.time ? time > o.time : seq > o.seq; }
  };
  struct CollectiveState {
    int ready_members = 0;
    int phase = -1;
    int64_t flows_left = 0;
    std::vector<FlowPhase> phases;
  };
  enum class FlowOwner : uint8_t { kCollective, kP2P };

  void build_successors();
  int64_t push(double time, int kind, int id) {
    queue_.push({time, seq_, kind, id});
    return seq_++;
  }
  void op_ready(OpId id, double t);
  void start_compute(OpId id, double t);
  void schedule_compute_end(OpId id, double t);
  void comm_begins(int rank, double t);
  void comm_ends(int rank, double t);
  void retime_compute(int rank, double t);
  double rate_share(int rank) const { return comm_ops_[rank] > 0 ? overlapped_share_ : 1.0; }
  // A compute op's rate: the rank's share, split evenly among the device compute ops running
  // on its streams at once (two micro-batches' kernels share one GPU); host streams' ops
  // (NetMoE's solve) run beside them at their own rate.
  double op_rate(OpId id) const;
  bool on_device(const sched::Op& op) const { return !s_.host_stream(op.stream); }
  void op_done(OpId id, double t);
  void collective_member_ready(OpId id, double t);
  bool blocked(CollectiveId c) const;
  bool gate_closed(CollectiveId c) const;
  void open_gates(CollectiveId micro_op, double t);
  bool waits_on(CollectiveId p, CollectiveId d) const;
  void start_collective(CollectiveId c, double t);
  void start_phase(CollectiveId c, double t);
  void end_collective(CollectiveId c, double t);
  bool release_deferred(double t);  // true if any started
  struct PendingFlow {
    int src, dst;
    double bytes;
    int multiplicity, priority;
    double weight;
    FlowOwner owner;
    int id;
  };
  void start_flows(const FlowPhase& phase, int priority, double t, FlowOwner owner, int id);
  // Counts a flow's bytes on the links of its path (before any efficiency scaling).
  void count_bytes(const FlowSpec& flow);
  // Scales the flows of a collective by the measured efficiency of its level (see
  // apply_efficiency's comment) and counts their bytes.
  void apply_efficiency(const sched::Collective& collective, std::vector<FlowPhase>& phases);
  std::unordered_map<int, double> phase_overheads(const FlowPhase& phase) const;
  void launch(const PendingFlow& p, double t);
  void flow_done(FlowId f, double t);
  SimResult result() const;
  double compute_time(const sched::Op& op) const;

  const sched::Schedule& s_;
  const core::Topology& topo_;
  SimOptions options_;
  FlowNetwork net_;
  NetworkModel model_;
  cost::CollectiveModel curves_;  // the cluster's efficiency curves, as plan's estimators read them
  std::vector<double> link_bytes_;  // per link: the bytes its flows carry (what counters count)
  int devices_per_node_ = 1;
  // Compute slowed by communication in flight on its rank (Device::overlapped_compute_share):
  // per rank, its comm ops that are ready and not done, and its compute ops running; per
  // compute op, its time left at the full rate, since when, and the seq of its live end event.
  double overlapped_share_ = 1.0;
  std::vector<int> comm_ops_;
  std::vector<std::vector<OpId>> computing_;
  std::vector<double> compute_left_, compute_since_, compute_rate_;
  std::vector<int64_t> compute_end_seq_;
  std::vector<int> device_ops_;  // per rank: device compute ops running

  std::vector<std::vector<OpId>> succ_;
  std::vector<int> waiting_;  // unfinished predecessors per op
  std::vector<OpTiming> timing_;
  std::vector<CollectiveState> coll_;
  // Per rank: collectives of priority >= 0 pending (a member waits in it) or running.
  std::vector<std::vector<CollectiveId>> in_flight_;
  std::vector<CollectiveId> deferred_;
  // Lina's gate, per rank: micro-ops (priority < 0) running, and the members of priority >= 0
  // collectives that became ready meanwhile and wait for them; collectives so held back.
  std::vector<int> micro_ops_running_;
  std::vector<std::vector<OpId>> at_gate_;
  std::vector<CollectiveId> gated_;
  std::vector<std::pair<FlowOwner, int>> flow_owner_;  // by FlowId
  std::vector<char> p2p_ready_;
  std::vector<PendingFlow> pending_;
  std::vector<char> done_;
  std::vector<char> ready_;  // per op: its predecessors are done
  std::priority_queue<Event, std::vector<Event>, std::greater<>> queue_;
  int64_t seq_ = 0;
  int64_t flows_ = 0;
};

void Run::build_successors() {
  const int n = s_.num_ops();
  succ_.assign(n, {});
  waiting_.assign(n, 0);
  for (OpId id = 0; id < n; ++id) {
    const sched::Op& op = s_.op(id);
    if (op.prev != sched::kNone) {
      succ_[op.prev].push_back(id);
      ++waiting_[id];
    }
    for (OpId dep : s_.deps(id)) {
      succ_[dep].push_back(id);
      ++waiting_[id];
    }
  }
}

double Run::compute_time(const sched::Op& op) const {
  const core::Device& d = topo_.cluster().device;
  double t = 0;
  if (op.kind == OpKind::kCompute && op.flops > 0) {
    const bool backward = s_.labels()[op.label].phase == sched::Phase::kBackward;
    const core::Dtype dtype = s_.compute_dtype();
    const double efficiency = options_.compute_efficiency.value_or(d.compute_efficiency);
    t = op.flops / ((backward ? d.backward_peak(dtype) : d.peak_flops(dtype)) * efficiency);
  }
  if (op.bytes > 0 && d.memory_bandwidth > 0) t = std::max(t, op.bytes / d.memory_bandwidth);
  return t;
}

void Run::op_ready(OpId id, double t) {
  const sched::Op& op = s_.op(id);
  ready_[id] = 1;
  timing_[id].start = t;
  switch (op.kind) {
    case OpKind::kCompute:
      start_compute(id, t);
      return;
    case OpKind::kCopy:
      push(t + compute_time(op), 0, id);
      return;
    case OpKind::kSend:
    case OpKind::kRecv: {
      comm_begins(op.rank, t);
      p2p_ready_[id] = 1;
      if (!p2p_ready_[op.twin]) return;
      const OpId send = op.kind == OpKind::kSend ? id : op.twin;
      const sched::Op& sop = s_.op(send);
      timing_[id].start = timing_[op.twin].start = t;  // the transfer starts when both are ready
      if (sop.rank == sop.peer || sop.bytes == 0) {
        op_done(id, t);
        op_done(op.twin, t);
        return;
      }
      count_bytes({sop.rank, sop.peer, sop.bytes, 1});
      start_flows({{sop.rank, sop.peer, sop.bytes, 1}}, sop.priority, t, FlowOwner::kP2P, send);
      return;
    }
    default:
      comm_begins(op.rank, t);
      collective_member_ready(id, t);
  }
}

void Run::start_compute(OpId id, double t) {
  const sched::Op& op = s_.op(id);
  compute_left_[id] = compute_time(op);
  compute_since_[id] = t;
  compute_rate_[id] = 1.0;
  computing_[op.rank].push_back(id);
  if (on_device(op) && ++device_ops_[op.rank] > 1) return retime_compute(op.rank, t);
  compute_rate_[id] = op_rate(id);
  schedule_compute_end(id, t);
}

double Run::op_rate(OpId id) const {
  const sched::Op& op = s_.op(id);
  const int sharing = on_device(op) ? std::max(1, device_ops_[op.rank]) : 1;
  return rate_share(op.rank) / sharing;
}

void Run::schedule_compute_end(OpId id, double t) {
  compute_end_seq_[id] = push(t + compute_left_[id] / compute_rate_[id], 0, id);
}

void Run::comm_begins(int rank, double t) {
  if (++comm_ops_[rank] == 1 && overlapped_share_ < 1.0) retime_compute(rank, t);
}

void Run::comm_ends(int rank, double t) {
  if (--comm_ops_[rank] == 0 && overlapped_share_ < 1.0) retime_compute(rank, t);
}

// The rank's rates changed at t: its running compute ops keep the work done at their old rate
// and get new end events at the new one (the old events are skipped by their seq).
void Run::retime_compute(int rank, double t) {
  for (OpId id : computing_[rank]) {
    compute_left_[id] =
        std::max(0.0, compute_left_[id] - (t - compute_since_[id]) * compute_rate_[id]);
    compute_since_[id] = t;
    compute_rate_[id] = op_rate(id);
    schedule_compute_end(id, t);
  }
}

void Run::op_done(OpId id, double t) {
  const sched::Op& op = s_.op(id);
  if (op.kind == OpKind::kCompute) {
    std::erase(computing_[op.rank], id);
    if (on_device(op) && --device_ops_[op.rank] > 0) retime_compute(op.rank, t);
  }
  if (op.kind != OpKind::kCompute && op.kind != OpKind::kCopy) comm_ends(op.rank, t);
  timing_[id].end = t;
  done_[id] = 1;
  for (OpId next : succ_[id]) {
    if (--waiting_[next] == 0) op_ready(next, t);
  }
}

void Run::collective_member_ready(OpId id, double t) {
  const CollectiveId c = s_.op(id).collective;
  const sched::Collective& col = s_.collective(c);
  CollectiveState& st = coll_[c];
  if (sched::waits_for_micro_ops(s_.op(id))) {
    if (st.ready_members == 0)
      for (int r : col.group) in_flight_[r].push_back(c);
    const int rank = s_.op(id).rank;
    if (micro_ops_running_[rank] > 0) at_gate_[rank].push_back(id);  // waits outside the call
  }
  if (++st.ready_members < col.size()) return;
  if (sched::yields_to_traffic(s_.op(id))) {  // decided once this instant's events are in
    deferred_.push_back(c);
    return;
  }
  if (gate_closed(c)) {
    gated_.push_back(c);
    return;
  }
  start_collective(c, t);
}

// A collective of priority >= 0 waits while a micro-op runs on one of its ranks.
bool Run::gate_closed(CollectiveId c) const {
  const core::RankGroup& g = s_.collective(c).group;
  return std::any_of(g.begin(), g.end(), [&](int r) { return micro_ops_running_[r] > 0; });
}

// Micro-op m ended at t: on its ranks where no other runs, the members waiting at the gate
// enter their calls; the collectives it held back start when no other micro-op holds them.
void Run::open_gates(CollectiveId m, double t) {
  for (int r : s_.collective(m).group) {
    if (--micro_ops_running_[r] > 0) continue;
    for (OpId op : std::exchange(at_gate_[r], {})) timing_[op].gated_until = t;
  }
  // Taken out first: a start may end at once and gate others meanwhile.
  for (CollectiveId c : std::exchange(gated_, {})) {
    if (gate_closed(c)) {
      gated_.push_back(c);
    } else {
      start_collective(c, t);
    }
  }
}

bool Run::blocked(CollectiveId c) const {
  for (int r : s_.collective(c).group) {
    for (CollectiveId p : in_flight_[r]) {
      if (coll_[p].phase >= 0 || !waits_on(p, c)) return true;
    }
  }
  return false;
}

// Whether pending collective p cannot start before deferred collective d: one of p's members
// not yet ready waits, through unfinished ops, on an op of d. Then p must not hold d back
// (that would deadlock). The search is bounded; past the bound p is taken as blocking.
bool Run::waits_on(CollectiveId p, CollectiveId d) const {
  const auto& d_ops = s_.collective(d).ops;
  std::vector<OpId> stack;
  for (OpId op : s_.collective(p).ops) {
    if (!ready_[op]) stack.push_back(op);
  }
  std::unordered_map<OpId, char> seen;
  while (!stack.empty() && seen.size() < 4096) {
    const OpId op = stack.back();
    stack.pop_back();
    if (!seen.emplace(op, 1).second || done_[op]) continue;
    if (std::find(d_ops.begin(), d_ops.end(), op) != d_ops.end()) return true;
    if (s_.op(op).prev != sched::kNone) stack.push_back(s_.op(op).prev);
    for (OpId dep : s_.deps(op)) stack.push_back(dep);
  }
  return false;
}

void Run::start_collective(CollectiveId c, double t) {
  const sched::Collective& col = s_.collective(c);
  for (OpId op : col.ops) timing_[op].start = std::max(timing_[op].start, t);
  if (sched::yields_to_traffic(col))
    for (int r : col.group) ++micro_ops_running_[r];
  coll_[c].phases = collective_phases(col, devices_per_node_);
  apply_efficiency(col, coll_[c].phases);
  coll_[c].phase = -1;
  start_phase(c, t);
}

void Run::count_bytes(const FlowSpec& flow) {
  for (int link : model_.path(flow.src, flow.dst)) link_bytes_[link] += flow.bytes;
}

std::optional<cost::Collective> curve_key(OpKind kind) {
  switch (kind) {
    case OpKind::kAllToAll:
      return cost::Collective::kAllToAll;
    case OpKind::kAllGather:
      return cost::Collective::kAllGather;
    case OpKind::kReduceScatter:
      return cost::Collective::kReduceScatter;
    case OpKind::kAllReduce:
      return cost::Collective::kAllReduce;
    default:
      return std::nullopt;  // Broadcast and point to point: no curve is measured for them
  }
}

// The cluster's measured efficiency (MoNTA's r(volume), core::Cluster::efficiency): a flow
// of a collective that crosses level l moves at l's bandwidth x r_{l, collective}(S), where
// S is the collective's message size as nccl-tests counts it (the AllGather's output, the
// ReduceScatter's input, the AllReduce's buffer, an A2A's per-rank send buffer: the mean of
// its members' sends). The flow's bytes are divided by r, so it holds its links as long as
// the measured collective held them; the byte counters count the bytes themselves.
void Run::apply_efficiency(const sched::Collective& col, std::vector<FlowPhase>& phases) {
  const std::optional<cost::Collective> key = curve_key(col.kind);
  double size = col.bytes;
  if (col.kind == OpKind::kAllToAll) {
    double sum = 0;
    for (double b : col.pair_bytes) sum += b;
    size = col.size() > 0 ? sum / col.size() : 0;
  }
  for (FlowPhase& phase : phases) {
    for (FlowSpec& f : phase) {
      count_bytes(f);
      if (key) f.bytes /= curves_.efficiency(*key, model_.meet_level(f.src, f.dst), size);
    }
  }
}

void Run::start_phase(CollectiveId c, double t) {
  CollectiveState& st = coll_[c];
  while (++st.phase < static_cast<int>(st.phases.size())) {
    if (st.phases[st.phase].empty()) continue;
    start_flows(st.phases[st.phase], s_.collective(c).priority, t, FlowOwner::kCollective, c);
    return;
  }
  end_collective(c, t);
}

void Run::end_collective(CollectiveId c, double t) {
  const sched::Collective& col = s_.collective(c);
  coll_[c].phases.clear();
  if (!sched::yields_to_traffic(col)) {
    for (int r : col.group) std::erase(in_flight_[r], c);
  } else {
    open_gates(c, t);
  }
  for (OpId op : col.ops) op_done(op, t);
}

// Lina's A2A first: a deferred collective starts once no collective of priority >= 0 is
// pending (a member waits in it) or running on its ranks. Called after all events of an
// instant, so the outcome does not depend on the order ops became ready.
bool Run::release_deferred(double t) {
  bool started = false;
  // Taken out first: a start may end at once and defer others meanwhile.
  for (CollectiveId d : std::exchange(deferred_, {})) {
    if (blocked(d)) {
      deferred_.push_back(d);
    } else {
      start_collective(d, t);
      started = true;
    }
  }
  return started;
}

// Flows of a phase that share their whole path and latency become one flow with a
// multiplicity (the pair flows of an A2A between two nodes); their bytes are averaged, which
// keeps each path's total and is exact when the pairs carry equal bytes.
void Run::start_flows(const FlowPhase& phase, int priority, double t, FlowOwner owner, int id) {
  if (!topo_.cluster().network_priorities) priority = 0;  // one traffic class for every flow
  struct Group {
    int src, dst, steps, count = 0;
    double bytes = 0, overhead = 0;
  };
  const std::unordered_map<int, double> overhead = phase_overheads(phase);
  std::map<std::tuple<long long, int, double>, Group> groups;
  for (const FlowSpec& f : phase) {
    const double o = overhead.empty() ? 0.0 : overhead.at(f.src) + overhead.at(~f.dst);
    Group& g = groups[{model_.path_key(f.src, f.dst), f.steps, o}];
    g.src = f.src;
    g.dst = f.dst;
    g.steps = f.steps;
    g.overhead = o;
    ++g.count;
    g.bytes += f.bytes;
  }
  if (owner == FlowOwner::kCollective) coll_[id].flows_left = static_cast<int64_t>(groups.size());
  flows_ += static_cast<int64_t>(groups.size());
  // Per-collective fairness: the members one collective puts on a link weigh 1 together, so
  // an A2A with hundreds of pair flows and a ring AllReduce with one flow per link share a
  // link evenly (each collective is one NCCL communicator; Lina Fig. 7a's fair sharing).
  std::unordered_map<int, int> members_on_link;
  if (options_.fairness.value_or(topo_.cluster().fairness) == Fairness::kPerCollective) {
    for (const auto& [key, g] : groups) members_on_link[model_.path(g.src, g.dst)[0]] += g.count;
  }
  for (const auto& [key, g] : groups) {
    PendingFlow p{g.src, g.dst, g.bytes / g.count, g.count, priority, 1.0, owner, id};
    if (!members_on_link.empty()) p.weight = 1.0 / members_on_link[model_.path(g.src, g.dst)[0]];
    // A ring's later steps each pay the link latency again; the network pays the first.
    // Every step pays the sender's and the receiver's per-message overheads.
    const double extra = (g.steps - 1) * model_.latency(g.src, g.dst) + g.steps * g.overhead;
    if (extra > 0) {
      pending_.push_back(p);
      push(t + extra, 2, static_cast<int>(pending_.size() - 1));
    } else {
      launch(p, t);
    }
  }
}

// LogGP's o: a rank injects its messages of a phase one after another, and drains the ones
// it receives likewise, so a flow starts once its sender has paid o for each message it
// sends in the phase and its receiver o for each it receives (a single message: L + 2o, as in
// LogP; a flat A2A over n ranks: L + 2(n-1)o). Keys: rank for the sender's sum, ~rank for the
// receiver's. Empty when no level charges an overhead.
std::unordered_map<int, double> Run::phase_overheads(const FlowPhase& phase) const {
  std::unordered_map<int, double> sum;
  if (!model_.has_overhead()) return sum;
  for (const FlowSpec& f : phase) {
    const double o = model_.overhead(f.src, f.dst);
    sum[f.src] += o;
    sum[~f.dst] += o;
  }
  return sum;
}

void Run::launch(const PendingFlow& p, double t) {
  const FlowId f =
      net_.start_flow(model_.path(p.src, p.dst), p.bytes, t, p.multiplicity, p.priority, p.weight);
  if (static_cast<size_t>(f) >= flow_owner_.size()) flow_owner_.resize(f + 1);
  flow_owner_[f] = {p.owner, p.id};
}

void Run::flow_done(FlowId f, double t) {
  const auto [owner, id] = flow_owner_[f];
  if (owner == FlowOwner::kP2P) {
    op_done(id, t);
    op_done(s_.op(id).twin, t);
    return;
  }
  if (--coll_[id].flows_left == 0) start_phase(id, t);
}

SimResult Run::run() {
  if (s_.world_size() != topo_.world_size()) {
    throw Error("simulate", "the schedule has " + std::to_string(s_.world_size()) +
                                " ranks but the cluster " + topo_.cluster().name + " has " +
                                std::to_string(topo_.world_size()));
  }
  s_.validate();
  build_successors();
  timing_.assign(s_.num_ops(), {});
  coll_.assign(s_.num_collectives(), {});
  in_flight_.assign(s_.world_size(), {});
  micro_ops_running_.assign(s_.world_size(), 0);
  at_gate_.assign(s_.world_size(), {});
  ready_.assign(s_.num_ops(), 0);
  p2p_ready_.assign(s_.num_ops(), 0);
  done_.assign(s_.num_ops(), 0);
  comm_ops_.assign(s_.world_size(), 0);
  computing_.assign(s_.world_size(), {});
  compute_left_.assign(s_.num_ops(), 0.0);
  compute_since_.assign(s_.num_ops(), 0.0);
  compute_rate_.assign(s_.num_ops(), 1.0);
  device_ops_.assign(s_.world_size(), 0);
  compute_end_seq_.assign(s_.num_ops(), -1);
  for (OpId id = 0; id < s_.num_ops(); ++id) {
    if (waiting_[id] == 0) op_ready(id, 0.0);
  }
  double instant = 0;  // the time whose events are being processed
  while (true) {
    const double tq = queue_.empty() ? kInf : queue_.top().time;
    const double tn = net_.next_event_time();
    if (!deferred_.empty() && std::min(tq, tn) > instant) {  // the instant is complete
      if (release_deferred(instant)) continue;               // something started: look again
    }
    instant = std::min(tq, tn);
    if (tq == kInf && tn == kInf) {
      if (deferred_.empty()) break;
      // Only deferred collectives are left and nothing can unblock them: run them.
      std::vector<CollectiveId> now = std::move(deferred_);
      deferred_.clear();
      for (CollectiveId c : now) start_collective(c, net_.now());
      continue;
    }
    if (tn <= tq) {
      for (FlowId f : net_.advance_to(tn)) flow_done(f, tn);
      continue;
    }
    for (FlowId f : net_.advance_to(tq)) flow_done(f, tq);  // flows within tolerance of tq
    while (!queue_.empty() && queue_.top().time == tq) {
      const Event e = queue_.top();
      queue_.pop();
      if (e.kind == 0) {
        const bool stale = s_.op(e.id).kind == OpKind::kCompute && compute_end_seq_[e.id] != e.seq;
        if (!stale) op_done(e.id, e.time);
      } else {
        launch(pending_[e.id], e.time);
      }
    }
  }
  for (OpId id = 0; id < s_.num_ops(); ++id) {
    if (!done_[id]) {
      throw Error("simulate", s_.describe(id) + " never ran: it waits on ops that cannot finish");
    }
  }
  return result();
}

SimResult Run::result() const {
  SimResult r;
  r.ops = timing_;
  r.rank_end_s.assign(s_.world_size(), 0.0);
  for (OpId id = 0; id < s_.num_ops(); ++id) {
    const int rank = s_.op(id).rank;
    r.rank_end_s[rank] = std::max(r.rank_end_s[rank], timing_[id].end);
  }
  for (double e : r.rank_end_s) r.makespan_s = std::max(r.makespan_s, e);
  for (const LinkStats& l : net_.busiest_links(16)) {
    if (link_bytes_[l.id] > 0) r.busiest_links.push_back({l.name, link_bytes_[l.id], l.busy_time});
  }
  r.flows = flows_;
  r.bytes_by_level.assign(topo_.num_levels(), 0.0);
  for (int l = 0; l < net_.num_links(); ++l) {
    const int level = model_.egress_level(l);
    if (level >= 0) r.bytes_by_level[level] += link_bytes_[l];
  }
  return r;
}

}  // namespace

SimResult simulate(const sched::Schedule& schedule, const core::Topology& topology,
                   const SimOptions& options) {
  const double efficiency =
      options.compute_efficiency.value_or(topology.cluster().device.compute_efficiency);
  if (!(efficiency > 0 && efficiency <= 1)) {
    throw Error("simulate", "compute efficiency must be in (0, 1]");
  }
  return Run(schedule, topology, options).run();
}

}  // namespace moecomm::sim
