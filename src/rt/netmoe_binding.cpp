#include "rt/netmoe_binding.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "core/error.h"
#include "rt/row_bytes.h"

namespace moecomm::rt {
namespace {

std::vector<std::byte> bytes_of(const std::vector<int>& v) {
  std::vector<std::byte> out;
  append(out, v.data(), v.size() * sizeof(int));
  return out;
}

std::vector<int> ints_of(const std::vector<std::byte>& data) {
  std::vector<int> out(data.size() / sizeof(int));
  if (!out.empty()) std::memcpy(out.data(), data.data(), out.size() * sizeof(int));
  return out;
}

std::string where(int layer, int phase, int chunk) {
  return "placement=netmoe layer " + std::to_string(layer) +
         (phase == 0 ? " forward" : " backward") + " chunk " + std::to_string(chunk);
}

}  // namespace

NetMoeBinding::NetMoeBinding(nn::MoeTransformer& model, int world, const core::RankGroup& a2a_group,
                             int member, int ranks_per_node, std::vector<std::array<int, 2>> chunks)
    : model_(model),
      world_(world),
      group_(a2a_group),
      member_(member),
      cols_(model.config().hidden),
      planner_(a2a_group, ranks_per_node, model.config().layers, model.config().moe.experts),
      chunks_(std::move(chunks)),
      layers_(chunks_.size()),
      scatter_rows_(a2a_group.size(), 0),
      gather_rows_(a2a_group.size(), 0) {
  model_.move_samples(int(group_.size()), member_);
  for (size_t l = 0; l < layers_.size(); ++l)
    for (int phase = 0; phase < 2; ++phase)
      for (auto& bufs : phase == 0 ? layers_[l].fwd : layers_[l].bwd)
        bufs.resize(size_t(chunks_[l][size_t(phase)]));
}

void NetMoeBinding::start_step(const std::vector<int>& targets, int) {
  targets_.data = bytes_of(targets);
  meta_bytes_.assign(size_t(world_), 0);
  stats_ = {};
  for (Layer& l : layers_) l.has_layout = false;
}

void NetMoeBinding::count_meta(int member, int64_t bytes) {
  meta_bytes_.at(size_t(group_.at(size_t(member)))) += bytes;
}

// --- kernels

void NetMoeBinding::add_kernels(std::map<sched::OpRole, Kernel>& kernels) {
  using R = sched::OpRole;
  kernels[R::kGate] = [this](const sched::Label& l) {
    if (l.phase == sched::Phase::kForward) return gate_forward(l.layer);
    gate_backward(l.layer);
  };
  kernels[R::kExpert] = [this](const sched::Label& l) {
    expert(l.layer, phase_index(l.phase), l.chunk);
  };
  kernels[R::kPlacementSolve] = [this](const sched::Label& l) { solve(l.layer); };
}

// NetMoE Alg. 1 line 9: the gate, and what the counts and aux AllGathers send.
void NetMoeBinding::gate_forward(int l) {
  model_.moving_begin(l, chunks_.at(size_t(l))[0], chunks_[size_t(l)][1]);
  const nn::SampleMovingMoe& m = model_.moving(l);
  std::vector<int> mine = m.samples();
  mine.insert(mine.end(), m.sample_counts().begin(), m.sample_counts().end());
  layer(l).counts.data = bytes_of(mine);
  layer(l).aux.data = bytes_of(m.aux_sums());
  ++scatters_;
}

void NetMoeBinding::gate_backward(int l) {
  model_.moving_backward_done(l);
}

// Every member solves the same problem from the same gathered counts (NetMoePlanner).
void NetMoeBinding::solve(int l) {
  const int batch = int(model_.moving(l).samples().size());
  const place::RoutingCounts problem = planner_.problem(l, ints_of(layer(l).counts.data), batch);
  place::SamplePlacement placed = placer_.place(problem, planner_.expert_device(), planner_.grid());
  model_.moving(l).set_placement(placed.sample_device);
  stats_.solve_us += placed.solve_us;
  ++stats_.solves;
  layer(l).solved = Clock::now();
}

void NetMoeBinding::expert(int l, int phase, int chunk) {
  nn::SampleMovingMoe& m = model_.moving(l);
  const int n = chunks_.at(size_t(l))[size_t(phase)];
  for (int i = 0; i < n; ++i) {
    if (chunk >= 0 && chunk != i) continue;
    if (phase == 0) {
      m.expert_chunk(i);
      if (i == 0) layer(l).first_expert = Clock::now();
    } else {
      m.backward_expert(i);
    }
  }
}

void NetMoeBinding::forward_done(int l) {
  const Layer& s = layer(l);
  stats_.wait_us +=
      std::max(0.0, std::chrono::duration<double, std::micro>(s.solved - s.first_expert).count());
  model_.moving_done(l);
}

void NetMoeBinding::backward_begin(int l) {
  model_.moving_backward_begin(l);
}

// --- collectives

// NetMoE's part of a collective, if it has one.
std::optional<NetMoeBinding::Op> NetMoeBinding::op_of(sched::OpRole role) {
  switch (role) {
    case sched::OpRole::kDispatchA2A:
      return Op::kDispatch;
    case sched::OpRole::kCombineA2A:
      return Op::kCombine;
    case sched::OpRole::kPlacementCountsAllGather:
      return Op::kCounts;
    case sched::OpRole::kPlacementAuxAllGather:
      return Op::kAux;
    case sched::OpRole::kPlacementTargetsAllGather:
      return Op::kTargets;
    default:
      return std::nullopt;
  }
}

OpBuffer* NetMoeBinding::buffer(sched::OpRole role, int l, int phase, int chunk) {
  const auto op = op_of(role);
  return op ? op_buffer(*op, l, phase, chunk) : nullptr;
}

void NetMoeBinding::after(sched::OpRole role, int l, int phase, int chunk) {
  if (const auto op = op_of(role)) op_after(*op, l, phase, chunk);
}

// `rows` into `buf` by member; the forward scatter puts the sender's counts for the
// destination's L experts ahead of its rows (the receiver learns the layout from them).
void NetMoeBinding::fill(OpBuffer& buf, const nn::SampleMovingMoe::Rows& rows,
                         const std::vector<int>& header_of, bool forward_scatter) {
  const int64_t width = rows.rows.cols();
  const int local = model_.config().moe.experts / int(group_.size());
  buf = {};
  int64_t at = 0;
  for (size_t j = 0; j < rows.send.size(); ++j) {
    const size_t before = buf.data.size();
    if (forward_scatter) {
      append(buf.data, header_of.data() + j * size_t(local), size_t(local) * sizeof(int));
      count_meta(int(j), int64_t(local * sizeof(int)));
    }
    const int64_t n = rows.send[j];
    append(buf.data, rows.rows.data() + at * width, size_t(n * width) * sizeof(float));
    count_meta(int(j), n * rows.meta_cols * int64_t(sizeof(float)));
    at += n;
    buf.counts.push_back(int64_t(buf.data.size() - before));
  }
  if (forward_scatter) return;  // the headers tell the receivers what they get
  for (int r : rows.recv) buf.recv_counts.push_back(int64_t(r) * width * int64_t(sizeof(float)));
}

OpBuffer* NetMoeBinding::op_buffer(Op op, int l, int phase, int chunk) {
  const int i = std::max(chunk, 0);
  Layer& s = layer(l);
  nn::SampleMovingMoe& m = model_.moving(l);
  switch (op) {
    case Op::kCounts:
      return &s.counts;
    case Op::kAux:
      return &s.aux;
    case Op::kTargets:
      return &targets_;
    case Op::kDispatch: {
      OpBuffer& buf = (phase == 0 ? s.fwd : s.bwd)[0].at(size_t(i));
      const nn::SampleMovingMoe::Rows rows = phase == 0 ? m.scatter_send(i) : m.dy_send(i);
      fill(buf, rows, m.send_counts(), phase == 0);
      if (phase == 0)
        for (size_t j = 0; j < rows.send.size(); ++j) scatter_rows_[j] += rows.send[j];
      return &buf;
    }
    case Op::kCombine: {
      OpBuffer& buf = (phase == 0 ? s.fwd : s.bwd)[1].at(size_t(i));
      const nn::SampleMovingMoe::Rows rows = phase == 0 ? m.gather_send(i) : m.dh_send(i);
      fill(buf, rows, {}, false);
      if (phase == 0)
        for (size_t j = 0; j < rows.send.size(); ++j) gather_rows_[j] += rows.send[j];
      return &buf;
    }
  }
  return nullptr;
}

// The rows received, source by source (forward scatter: learning the layout from the headers
// at the first chunk that arrives).
nn::Tensor NetMoeBinding::received(int l, OpBuffer& buf, int meta_cols, bool headers) {
  const int members = int(group_.size());
  const int local = model_.config().moe.experts / members;
  const size_t header = headers ? size_t(local) * sizeof(int) : 0;
  if (buf.counts.size() != size_t(members))
    throw Error("schedule runtime", "placement=netmoe layer " + std::to_string(l) +
                                        ": received from " + std::to_string(buf.counts.size()) +
                                        " of " + std::to_string(members) + " EP members");
  std::vector<std::byte> rows;
  std::vector<int> layout(size_t(members * local));
  size_t at = 0;
  for (int src = 0; src < members; ++src) {
    if (header) std::memcpy(&layout[size_t(src * local)], buf.data.data() + at, header);
    append(rows, buf.data.data() + at + header, size_t(buf.counts[size_t(src)]) - header);
    at += size_t(buf.counts[size_t(src)]);
  }
  if (headers && !layer(l).has_layout) {
    model_.moving(l).set_layout(layout);
    layer(l).has_layout = true;
  }
  const int64_t width = cols_ + meta_cols;
  nn::Tensor t({int64_t(rows.size() / sizeof(float)) / width, width});
  if (!rows.empty()) std::memcpy(t.data(), rows.data(), rows.size());
  return t;
}

void NetMoeBinding::op_after(Op op, int l, int phase, int chunk) {
  const int i = std::max(chunk, 0);
  Layer& s = layer(l);
  nn::SampleMovingMoe& m = model_.moving(l);
  switch (op) {
    case Op::kCounts:
      return;  // the solve reads the gathered blocks
    case Op::kAux:
      return m.set_aux(ints_of(s.aux.data));
    case Op::kTargets:
      return model_.set_group_targets(ints_of(targets_.data));
    case Op::kDispatch: {
      OpBuffer& buf = (phase == 0 ? s.fwd : s.bwd)[0].at(size_t(i));
      if (phase == 0)
        return m.scatter_received(i, received(l, buf, nn::SampleMovingMoe::kScatterMeta, true));
      return m.dy_received(i, received(l, buf, 0, false));
    }
    case Op::kCombine: {
      OpBuffer& buf = (phase == 0 ? s.fwd : s.bwd)[1].at(size_t(i));
      const int meta =
          phase == 0 ? nn::SampleMovingMoe::kGatherMeta : nn::SampleMovingMoe::kScatterBackwardMeta;
      const nn::Tensor rows = received(l, buf, meta, false);
      buf.data.clear();
      if (phase == 1) return m.dh_received(i, rows);
      std::vector<int> recv;
      for (int64_t c : buf.counts)
        recv.push_back(int(c / ((cols_ + meta) * int64_t(sizeof(float)))));
      return m.gather_received(rows, recv);
    }
  }
  throw Error("schedule runtime", where(l, phase, chunk) + ": unknown op");
}

}  // namespace moecomm::rt
