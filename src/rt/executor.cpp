#include "rt/executor.h"

#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstring>
#include <map>
#include <numeric>
#include <thread>

#include "core/error.h"
#include "rt/collectives.h"
#include "rt/thread_priority.h"
#include "sched/policy.h"

namespace moecomm::rt {
namespace {

using sched::OpId;
using sched::OpKind;

// Channels of collectives whose members use one stream are that stream; mixed ones come
// after every stream; send/recv and the start barrier have their own.
constexpr int kMixedChannels = 1 << 16;
constexpr int kP2PChannel = -1;
constexpr int kControlChannel = -2;
constexpr int kGateChannel = -3;

size_t whole(double bytes) {
  return static_cast<size_t>(std::llround(std::max(bytes, 0.0)));
}
size_t floats(double bytes) {
  return static_cast<size_t>(std::ceil(std::max(bytes, 0.0) / 4));
}

core::RankGroup everyone(int world) {
  core::RankGroup all(world);
  std::iota(all.begin(), all.end(), 0);
  return all;
}

std::span<float> as_floats(std::vector<std::byte>& data, const std::string& label) {
  if (data.size() % sizeof(float) != 0) {
    throw Error(
        label, "an fp32 reduction needs a multiple of 4 bytes, got " + std::to_string(data.size()));
  }
  return {reinterpret_cast<float*>(data.data()), data.size() / sizeof(float)};
}

void assign_floats(std::vector<std::byte>& data, const std::vector<float>& values) {
  data.resize(values.size() * sizeof(float));
  if (!values.empty()) std::memcpy(data.data(), values.data(), data.size());
}

}  // namespace

Executor::Executor(MPI_Comm world, const sched::Schedule& schedule, ExecOptions options)
    : world_(world), s_(schedule), options_(options) {
  int size = 0;
  check_mpi(MPI_Comm_size(world, &size), "MPI_Comm_size");
  check_mpi(MPI_Comm_rank(world, &me_), "MPI_Comm_rank");
  if (size != s_.world_size()) {
    throw Error("executor", "the schedule has " + std::to_string(s_.world_size()) +
                                " ranks but MPI has " + std::to_string(size));
  }
  s_.validate();
  build_comms();
}

Executor::~Executor() = default;

// Every rank derives the same keys from the same schedule, so the splits line up.
void Executor::build_comms() {
  std::vector<CommKey> keys = {{everyone(s_.world_size()), kControlChannel, "world"},
                               {everyone(s_.world_size()), kP2PChannel, "p2p"}};
  std::map<std::vector<int>, int> mixed;  // members' streams -> index
  for (sched::CollectiveId c = 0; c < s_.num_collectives(); ++c) {
    const sched::Collective& col = s_.collective(c);
    std::vector<int> streams;
    for (OpId op : col.ops) streams.push_back(s_.op(op).stream);
    const bool uniform =
        std::all_of(streams.begin(), streams.end(), [&](int st) { return st == streams.front(); });
    if (uniform) {
      keys.push_back({col.group, streams.front(), s_.stream_name(streams.front())});
    } else {
      const int k = mixed.emplace(streams, static_cast<int>(mixed.size())).first->second;
      keys.push_back({col.group, kMixedChannels + k, "members' streams"});
    }
  }
  const size_t collectives = keys.size();
  for (sched::CollectiveId c = 0; c < s_.num_collectives(); ++c) {
    const sched::Collective& col = s_.collective(c);
    gate_key_.push_back({col.group, kGateChannel, "Lina's gate"});
    if (sched::yields_to_traffic(col)) keys.push_back(gate_key_.back());
  }
  comms_ = CommPool(world_, keys);
  for (size_t c = 2; c < collectives; ++c) collective_key_.push_back(keys[c]);
}

ExecResult Executor::run() {
  const int streams = s_.num_streams(me_);
  done_.clear();
  done_.resize(s_.num_ops());
  for (OpId id : s_.ops_of(me_)) done_[id] = std::make_unique<Completion>();
  times_.assign(s_.num_ops(), {});
  op_bytes_.assign(size_t(s_.num_ops()), {});
  failed_ = false;
  error_ = nullptr;
  traffic_ = micro_ops_ = 0;
  votes_ = 0;
  held_s_ = 0;

  const Comm& control = comms_.at({everyone(s_.world_size()), kControlChannel});
  MPI_Request req = MPI_REQUEST_NULL;
  check_mpi(MPI_Ibarrier(control.handle(), &req), "MPI_Ibarrier");
  wait_all({&req, 1}, control, "start barrier",
           {"executor start", options_.timeout_s, options_.ranks_per_node});
  t0_ = MPI_Wtime();
  std::vector<std::thread> threads;
  for (int st = 0; st < streams; ++st) threads.emplace_back([this, st] { run_stream(st); });
  for (std::thread& t : threads) t.join();
  if (error_) std::rethrow_exception(error_);

  ExecResult result{times_, votes_, held_s_, {}, {}, op_bytes_, 0};
  for (OpId id : s_.ops_of(me_)) {
    if (!sched::is_collective(s_.op(id).kind)) continue;
    (s_.op(id).kind == OpKind::kAllToAll ? result.a2a_bytes : result.other_bytes) +=
        op_bytes_[size_t(id)];
  }
  for (OpId id : s_.ops_of(me_)) result.wall_s = std::max(result.wall_s, times_[id].end);
  return result;
}

// On CPU ranks a communication thread waits a scheduler slice behind another rank's GEMM; a
// stream whose ops only communicate asks for the standing a GPU's copy engines and NIC have
// (thread_priority.h).
bool Executor::communicates_only(int stream) const {
  const auto& ops = s_.stream_ops(me_, stream);
  return !ops.empty() && std::all_of(ops.begin(), ops.end(), [this](OpId id) {
    const OpKind k = s_.op(id).kind;
    return k != OpKind::kCompute && k != OpKind::kCopy;
  });
}

void Executor::run_stream(int stream) {
  if (communicates_only(stream)) prioritize_comm_thread();
  try {
    for (OpId id : s_.stream_ops(me_, stream)) {
      for (OpId dep : s_.deps(id)) wait_for(dep);
      if (failed_) return;
      enter_gate(id);
      if (failed_) return leave_gate(id);
      times_[id].start = MPI_Wtime() - t0_;
      try {
        run_op(id);
      } catch (...) {
        leave_gate(id);
        throw;
      }
      times_[id].end = MPI_Wtime() - t0_;
      leave_gate(id);
      if (after_) after_(id);
      finish(id);
    }
  } catch (...) {
    fail(std::current_exception());
  }
}

void Executor::wait_for(OpId dep) {
  Completion& c = *done_.at(dep);
  std::unique_lock lock(c.m);
  c.cv.wait(lock, [&] { return c.done || failed_.load(); });
}

void Executor::finish(OpId id) {
  Completion& c = *done_[id];
  {
    std::lock_guard lock(c.m);
    c.done = true;
  }
  c.cv.notify_all();
}

// Keeps the first error and wakes every waiter, so the other streams stop too.
void Executor::fail(std::exception_ptr error) {
  {
    std::lock_guard lock(error_m_);
    if (!error_) error_ = error;
  }
  failed_ = true;
  { std::lock_guard lock(gate_m_); }
  gate_cv_.notify_all();
  for (const auto& c : done_) {
    if (!c) continue;
    { std::lock_guard lock(c->m); }
    c->cv.notify_all();
  }
}

// A collective that waits for micro-ops counts as traffic from now (ready) and starts once
// no micro-op runs here; a micro-op claims the rank, then asks its group whether traffic is
// ready or running on any member, and while it is, lets go and asks again once none is here.
void Executor::enter_gate(OpId id) {
  const sched::Op& op = s_.op(id);
  if (sched::waits_for_micro_ops(op)) {
    std::unique_lock lock(gate_m_);
    ++traffic_;
    gate_cv_.wait(lock, [&] { return micro_ops_ == 0 || failed_.load(); });
    return;
  }
  if (!sched::yields_to_traffic(op)) return;
  const double start = MPI_Wtime();
  for (;;) {
    int busy = 0;
    {
      std::lock_guard lock(gate_m_);
      ++micro_ops_;
      busy = traffic_ > 0;
    }
    if (!vote_busy(id, busy)) break;
    std::unique_lock lock(gate_m_);
    --micro_ops_;
    gate_cv_.notify_all();
    // Busy elsewhere only: ask again shortly; busy here: once this rank's traffic is through.
    gate_cv_.wait_for(lock, std::chrono::microseconds(200),
                      [&] { return traffic_ == 0 || failed_.load(); });
    if (failed_) return;
  }
  held_s_ += MPI_Wtime() - start;
}

void Executor::leave_gate(OpId id) {
  const sched::Op& op = s_.op(id);
  const bool traffic = sched::waits_for_micro_ops(op), micro = sched::yields_to_traffic(op);
  if (!traffic && !micro) return;
  {
    std::lock_guard lock(gate_m_);
    (traffic ? traffic_ : micro_ops_) -= 1;
  }
  gate_cv_.notify_all();
}

// Whether traffic is ready or running on any member of the micro-op's group (MAX of `busy`).
bool Executor::vote_busy(OpId id, int busy) {
  const Comm& comm = comms_.at(gate_key_[size_t(s_.op(id).collective)]);
  int any = 0;
  MPI_Request req = MPI_REQUEST_NULL;
  check_mpi(MPI_Iallreduce(&busy, &any, 1, MPI_INT, MPI_MAX, comm.handle(), &req),
            "MPI_Iallreduce");
  wait_all({&req, 1}, comm, "Lina's gate vote", call_options(id, nullptr));
  ++votes_;
  return any != 0;
}

CallOptions Executor::call_options(OpId id, LinkBytes* bytes) const {
  const sched::Op& op = s_.op(id);
  return {sched::to_string(s_.label(id)) + " (op " + std::to_string(id) + ", stream " +
              std::to_string(op.stream) + ")",
          options_.timeout_s, options_.ranks_per_node, bytes, &failed_};
}

void Executor::run_op(OpId id) {
  switch (s_.op(id).kind) {
    case OpKind::kCompute:
    case OpKind::kCopy:
      if (const auto it = kernels_.find(id); it != kernels_.end()) {
        it->second();
      } else if (default_kernel_) {
        default_kernel_(id);
      }
      return;
    case OpKind::kSend:
    case OpKind::kRecv:
      run_p2p(id);
      return;
    default:
      run_collective(id);
  }
}

// a2a=dedup moves rows by token: the binding gives them with their tokens (OpBuffer::keyed).
void Executor::run_dedup(const sched::Collective& c, const Comm& comm, OpBuffer& buf,
                         const CallOptions& o) {
  if (!buf.keyed)
    throw Error(o.label, "a2a=dedup needs the rows with their tokens; this op's buffer has bytes");
  const auto plan = sched::cached_a2a_routing(c.algorithm, comm.group(),
                                              std::max(o.ranks_per_node, 1), c.direction);
  if (c.direction == sched::A2ADirection::kDispatch) {
    *buf.keyed = dedup_broadcast(comm, *buf.keyed, *plan, o);
    return;
  }
  buf.reduced = std::make_shared<ReducedRows>(dedup_reduce(comm, *buf.keyed, buf.tokens, *plan, o));
}

void Executor::run_collective(OpId id) {
  const sched::Collective& c = s_.collective(s_.op(id).collective);
  const Comm& comm = comms_.at(collective_key_[s_.op(id).collective]);
  OpBuffer fallback;
  OpBuffer& buf = *buffer_for(id, fallback);
  const CallOptions o = call_options(id, &op_bytes_[size_t(id)]);
  switch (c.kind) {
    case OpKind::kAllToAll: {
      if (c.algorithm == sched::Algorithm::kDedup) return run_dedup(c, comm, buf, o);
      Received<std::byte> r = all_to_all_v(comm, std::span<const std::byte>(buf.data), buf.counts,
                                           c.algorithm, o, buf.recv_counts);
      buf.data = std::move(r.data);
      buf.counts = std::move(r.counts);
      return;
    }
    case OpKind::kAllGather: {
      if (!buf.counts.empty()) {  // AllGather-v: counts[i] bytes from member i
        std::vector<std::byte> out(
            size_t(std::accumulate(buf.counts.begin(), buf.counts.end(), 0LL)));
        all_gather_v(comm, buf.data, buf.counts, out, o);
        buf.data = std::move(out);
        return;
      }
      std::vector<std::byte> out(buf.data.size() * comm.size());
      if (c.algorithm == sched::Algorithm::kRing)  // as the simulator decomposes it
        ring_all_gather(comm, buf.data, out, o);
      else
        all_gather(comm, buf.data, out, o);
      buf.data = std::move(out);
      return;
    }
    case OpKind::kReduceScatter:
      if (!buf.counts.empty()) {  // ReduceScatter-v: counts[j] bytes for member j
        std::vector<int64_t> counts;
        for (int64_t c : buf.counts) counts.push_back(c / int64_t(sizeof(float)));
        assign_floats(buf.data, reduce_scatter_v(comm, as_floats(buf.data, o.label), counts, o));
        return;
      }
      assign_floats(buf.data, c.algorithm == sched::Algorithm::kRing
                                  ? ring_reduce_scatter_sum(comm, as_floats(buf.data, o.label), o)
                                  : reduce_scatter_sum(comm, as_floats(buf.data, o.label), o));
      return;
    case OpKind::kAllReduce:
      all_reduce_sum(comm, as_floats(buf.data, o.label), o);
      return;
    case OpKind::kBroadcast: {
      const auto root = std::find(c.group.begin(), c.group.end(), c.root);
      broadcast(comm, std::span<std::byte>(buf.data), static_cast<int>(root - c.group.begin()), o);
      return;
    }
    default:
      throw std::logic_error("not a collective: " + s_.describe(id));
  }
}

void Executor::run_p2p(OpId id) {
  const sched::Op& op = s_.op(id);
  const Comm& comm = comms_.at({everyone(s_.world_size()), kP2PChannel});
  OpBuffer fallback;
  OpBuffer& buf = *buffer_for(id, fallback);
  const bool send = op.kind == OpKind::kSend;
  if (buf.data.size() > INT_MAX) throw Error(s_.describe(id), "payload exceeds 2 GiB");
  const int count = static_cast<int>(buf.data.size());
  MPI_Request req = MPI_REQUEST_NULL;
  check_mpi(send
                ? MPI_Isend(buf.data.data(), count, MPI_BYTE, op.peer, op.tag, comm.handle(), &req)
                : MPI_Irecv(buf.data.data(), count, MPI_BYTE, op.peer, op.tag, comm.handle(), &req),
            send ? "MPI_Isend" : "MPI_Irecv");
  const std::string what = std::string(send ? "send to" : "recv from") + " rank " +
                           std::to_string(op.peer) + " (tag " + std::to_string(op.tag) + ")";
  wait_all({&req, 1}, comm, what, call_options(id, nullptr));
}

// The caller's buffer, or zeros sized from the op: what the schedule says would move.
OpBuffer* Executor::buffer_for(OpId id, OpBuffer& fallback) const {
  if (buffers_) {
    if (OpBuffer* b = buffers_(id)) return b;
  }
  const sched::Op& op = s_.op(id);
  if (op.kind == OpKind::kSend || op.kind == OpKind::kRecv) {
    fallback.data.resize(whole(op.bytes));
    return &fallback;
  }
  const sched::Collective& c = s_.collective(op.collective);
  const size_t n = c.group.size();
  switch (c.kind) {
    case OpKind::kAllToAll:
      for (size_t j = 0; j < n; ++j) fallback.counts.push_back(whole(c.pair(op.member, int(j))));
      fallback.data.resize(std::accumulate(fallback.counts.begin(), fallback.counts.end(), 0LL));
      break;
    case OpKind::kAllGather:
      fallback.data.resize(whole(c.bytes / n));
      break;
    case OpKind::kReduceScatter:
      fallback.data.resize(floats(c.bytes / n) * n * sizeof(float));
      break;
    case OpKind::kAllReduce:
      fallback.data.resize(floats(c.bytes) * sizeof(float));
      break;
    default:
      fallback.data.resize(whole(c.bytes));
  }
  return &fallback;
}

std::vector<OpTime> gather_op_times(MPI_Comm world, const std::vector<OpTime>& mine,
                                    double timeout_s) {
  int size = 0, me = 0;
  check_mpi(MPI_Comm_size(world, &size), "MPI_Comm_size");
  check_mpi(MPI_Comm_rank(world, &me), "MPI_Comm_rank");
  MPI_Comm dup = MPI_COMM_NULL;
  check_mpi(MPI_Comm_dup(world, &dup), "MPI_Comm_dup");
  const Comm comm(dup, everyone(size), "world");
  std::vector<double> flat, merged(2 * mine.size());
  for (const OpTime& t : mine) flat.insert(flat.end(), {t.start, t.end});
  MPI_Request req = MPI_REQUEST_NULL;
  check_mpi(MPI_Ireduce(flat.data(), merged.data(), static_cast<int>(flat.size()), MPI_DOUBLE,
                        MPI_MAX, 0, comm.handle(), &req),
            "MPI_Ireduce");
  wait_all({&req, 1}, comm, "gather op times", {"gather op times", timeout_s});
  if (me != 0) return mine;
  std::vector<OpTime> out(mine.size());
  for (size_t i = 0; i < out.size(); ++i) out[i] = {merged[2 * i], merged[2 * i + 1]};
  return out;
}

}  // namespace moecomm::rt
