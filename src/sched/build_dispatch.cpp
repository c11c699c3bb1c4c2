// Baseline EP (A2A over the EP group, flat / 1DH / 2DH as the collective's algorithm tag),
// DeepSpeed's replicated TP dispatch, MoNTA's Drop + A2A + AllGather (O1) in N chunks (O2)
// with the reordering copy pipelined (O3), and the chunked pipeline of FSMoE (Fig. 3d) and
// Lina (A2A/FFN micro-ops). NetMoE and HybridEP shape the A2A's pair matrices.
#include "sched/build_dispatch.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "core/error.h"
#include "sched/build_grad_sync.h"
#include "sched/build_hybridep.h"
#include "sched/dedup_traffic.h"

namespace moecomm::sched {
namespace {

std::string str(double v) {
  return std::to_string(static_cast<long long>(v));
}

void check_parallel(const LayerSetup& setup) {
  const auto& p = setup.parallel;
  if (p.esp > 1 && p.tp != 1 && p.tp % p.esp != 0)
    throw Error("parallel: esp",
                "the MoE token path needs esp to divide tp (ESP inside a TP group) or tp = 1, "
                "got tp=" +
                    str(p.tp) + ", esp=" + str(p.esp));
  if (setup.strategy.tp_dispatch == TpDispatch::kDropAllGather && p.tp > 1 && p.tp != p.esp)
    throw Error("strategy: tp_dispatch",
                "drop-allgather needs tp = esp (MoNTA, DeepSpeed-TED: the ESP group gathers "
                "what the TP group dropped), got tp=" +
                    str(p.tp) + ", esp=" + str(p.esp));
}

// The given routed matrices (NetMoE placement or routing at home), one per EP group, checked.
std::vector<std::vector<double>> netmoe_pairs(const std::vector<std::vector<double>>& m,
                                              const core::RankGroups& groups,
                                              const std::string& field) {
  if (m.size() != groups.ep.size())
    throw Error(field, "routed dispatch (placement=netmoe) needs one matrix per EP group (" +
                           str(double(groups.ep.size())) + "), got " + str(double(m.size())));
  for (size_t k = 0; k < m.size(); ++k) {
    const size_t n = groups.ep[k].size();
    const std::string at = field + "[" + str(double(k)) + "]";
    if (m[k].size() != n * n)
      throw Error(at, "an EP group of " + str(double(n)) + " needs " + str(double(n * n)) +
                          " entries, got " + str(double(m[k].size())));
    for (double v : m[k])
      if (!std::isfinite(v) || v < 0) throw Error(at, "bytes must be finite and >= 0");
  }
  return m;
}

// Rows each rank computes relative to balanced routing: its column sum (what it receives,
// own share included) over the balanced per-rank bytes. With ESP the rank's own column
// stands for its group's load.
std::vector<double> expert_scale(const TokenPath& path, const core::RankGroups& groups,
                                 double balanced, int world) {
  std::vector<double> scale(world, 1.0);
  if (balanced <= 0) return scale;
  for (size_t k = 0; k < groups.ep.size(); ++k) {
    const auto& g = groups.ep[k];
    const size_t n = g.size();
    for (size_t j = 0; j < n; ++j) {
      double col = 0;
      for (size_t i = 0; i < n; ++i) col += path.dispatch[k][i * n + j];
      scale[g[j]] = col / balanced;
    }
  }
  return scale;
}

std::vector<std::vector<double>> scaled(const std::vector<std::vector<double>>& pairs,
                                        double factor) {
  auto out = pairs;
  for (auto& m : out)
    for (double& v : m) v *= factor;
  return out;
}

std::string a2a_knob(const Strategy& s) {
  if (s.expert_transfer == ExpertTransfer::kHybrid) return "hybrid";
  if (s.placement == Placement::kNetMoe) return "netmoe";
  return std::string(to_string(s.a2a));
}

int chunk_label(int i, int n) {
  return n == 1 ? -1 : i;
}

// Per chunk, the A2A over every EP group: forward the dispatch then the combine matrices;
// backward the combine's transposes (gradients from where the samples went to the experts)
// then the dispatch's (back to where they came from).
void a2a_chunks(BuildContext& ctx, std::vector<Frontier>& c, bool combine) {
  const int n = static_cast<int>(c.size());
  const bool backward = ctx.phase == Phase::kBackward;
  const TokenDirection wire = combine ? TokenDirection::kCombine : TokenDirection::kDispatch;
  const double scale = token_wire_scale(ctx, wire) / n;
  // In both phases the ops labelled dispatch carry rows toward the experts (the tokens, or
  // the gradients of the combine's outputs) and those labelled combine carry them back: dedup
  // runs its dispatch plan on the first, its combine plan on the second.
  const bool dedup = ctx.strategy.a2a == Algorithm::kDedup;
  auto pairs = scaled(
      dedup ? ctx.path.dedup_pairs : (combine == backward ? ctx.path.dispatch : ctx.path.combine),
      scale);
  auto nodes = scaled(ctx.path.dedup_nodes, scale);
  if (dedup ? combine : backward)
    for (size_t k = 0; k < pairs.size(); ++k) {
      const int members = static_cast<int>(ctx.groups.ep[k].size());
      pairs[k] = transposed(pairs[k], members);
      if (dedup) nodes[k] = transposed(nodes[k], members);
    }
  const OpRole role = combine ? OpRole::kCombineA2A : OpRole::kDispatchA2A;
  const int priority = traffic_priority(ctx.strategy, Traffic::kEp);
  const A2ADirection direction = combine ? A2ADirection::kCombine : A2ADirection::kDispatch;
  for (int i = 0; i < n; ++i)
    c[i] = a2a_step(ctx, pairs, ctx.label(role, a2a_knob(ctx.strategy), chunk_label(i, n)), c[i],
                    priority, token_codec(ctx, wire), nodes, direction);
}

// Bytes of the ESP/TP collectives per group, from the dispatch matrices (routed or uniform):
// what each rank receives (its column) or sends (its row) in the EP A2A.
std::vector<double> per_rank_a2a(const BuildContext& ctx, bool received) {
  std::vector<double> bytes(ctx.world(), 0.0);
  for (size_t k = 0; k < ctx.groups.ep.size(); ++k) {
    const auto& g = ctx.groups.ep[k];
    const size_t n = g.size();
    for (size_t i = 0; i < n; ++i)
      for (size_t j = 0; j < n; ++j) bytes[g[received ? j : i]] += ctx.path.dispatch[k][i * n + j];
  }
  return bytes;
}

// Per group, the sum over its members (an AllGather's output) or its first member's bytes
// (an AllReduce of rows every member holds alike).
std::vector<double> per_group(const std::vector<core::RankGroup>& groups,
                              const std::vector<double>& rank_bytes, bool sum) {
  std::vector<double> out;
  for (const auto& g : groups) {
    double b = 0;
    for (int r : g) b += rank_bytes[r];
    out.push_back(sum ? b : rank_bytes[g.front()]);
  }
  return out;
}

std::vector<double> divided(std::vector<double> v, double n) {
  for (double& x : v) x /= n;
  return v;
}

// Per chunk, an AllGather over `groups` of `bytes` (output, per group, as the workload counts
// them) on the intra-node stream, the rows travelling as the A2A's they extend (`direction`).
// When the experts wait for every chunk (MoNTA), the chunks arrive interleaved and a D2D copy of
// the chunk restores the layout (MoNTA Fig. 8): after the AllGather on its stream (O2, Algorithm 1:
// AG_j + D2D_j in series) or on the copy stream beside the next AllGather (O3, Algorithm 2).
void gather_chunks(BuildContext& ctx, std::vector<Frontier>& c,
                   const std::vector<core::RankGroup>& groups, const std::vector<double>& bytes,
                   OpRole role, OpRole copy_role, bool pipelined, TokenDirection direction) {
  const int n = static_cast<int>(c.size());
  const double wire = token_wire_scale(ctx, direction);
  std::vector<double> chunk_bytes = bytes;  // one chunk's, on the wire
  for (double& b : chunk_bytes) b = b * wire / n;
  const bool copies = !pipelined && n > 1;
  const int copy_stream = ctx.strategy.copy_pipelining ? kCopyStream : kIntraStream;
  const std::string knob = ctx.path.tp_gather ? "drop-allgather" : "esp";
  for (int i = 0; i < n; ++i) {
    c[i] =
        group_step(ctx, groups, OpKind::kAllGather, chunk_bytes, kIntraStream,
                   ctx.label(role, knob, chunk_label(i, n)), c[i], 0, token_codec(ctx, direction));
    if (copies)  // every member copies the whole gathered chunk; groups are equal-sized
      c[i] = copy_step(ctx, *std::max_element(chunk_bytes.begin(), chunk_bytes.end()), copy_stream,
                       ctx.label(copy_role, ctx.strategy.copy_pipelining ? "o3" : "o2", i), c[i]);
  }
}

// The expert FFNs: per chunk (pipelined) or once after every chunk (MoNTA).
void expert_chunks(BuildContext& ctx, std::vector<Frontier>& c, bool pipelined) {
  const int n = static_cast<int>(c.size());
  // Backward: input and weight gradients, 2x the forward; recompute_experts adds the forward
  // run again on the same rows first, to rebuild the activations the forward did not keep.
  const double backward = ctx.strategy.recompute_experts ? 3.0 : 2.0;
  const double factor = ctx.phase == Phase::kBackward ? backward : 1.0;
  const int pieces = pipelined ? n : 1;
  std::vector<double> flops(ctx.world());
  for (int r = 0; r < ctx.world(); ++r)  // the factor last: 3x is 2x plus 1x to the bit
    flops[r] = ctx.work.expert_flops * ctx.path.expert_scale[r] / pieces * factor;
  for (int r = 0; r < ctx.world(); ++r)  // HybridEP: the gathered experts must be there
    if (ctx.prefetch[r] != kNone)
      for (auto& chunk : c) chunk[r].push_back(ctx.prefetch[r]);
  if (!pipelined) {
    const Frontier all = compute_step(ctx, flops, ctx.label(OpRole::kExpert), merge(c));
    c.assign(n, all);
    return;
  }
  for (int i = 0; i < n; ++i)
    c[i] = compute_step(ctx, flops, ctx.label(OpRole::kExpert, "chunks", chunk_label(i, n)), c[i]);
}

// After the experts: ESP ReduceScatter of the gathered rows' partial outputs, or ESP
// AllReduce of the replicated rows' (Megatron's row-parallel expert output).
void reduce_chunks(BuildContext& ctx, std::vector<Frontier>& c) {
  const int n = static_cast<int>(c.size());
  const std::vector<double> recv = per_rank_a2a(ctx, true);
  const auto gathered = divided(per_group(ctx.groups.esp, recv, true), n);
  const auto replicated = divided(per_group(ctx.groups.esp, recv, false), n);
  for (int i = 0; i < n; ++i) {
    if (ctx.path.esp_gather)
      c[i] =
          group_step(ctx, ctx.groups.esp, OpKind::kReduceScatter, gathered, kIntraStream,
                     ctx.label(OpRole::kCombineEspReduceScatter, "esp", chunk_label(i, n)), c[i]);
    else if (ctx.path.esp_allreduce)
      c[i] = group_step(ctx, ctx.groups.esp, OpKind::kAllReduce, replicated, kIntraStream,
                        ctx.label(OpRole::kCombineEspAllReduce, "esp", chunk_label(i, n)), c[i]);
  }
}

// Per EP group, an AllGather's output of `per_member` bytes from each member.
std::vector<double> gathered_bytes(const BuildContext& ctx, double per_member) {
  std::vector<double> out;
  for (const auto& g : ctx.groups.ep) out.push_back(per_member * double(g.size()));
  return out;
}

// NetMoE Alg. 1 line 9: every member all-gathers the group's per-sample expert counts (its
// B sample ids and B x E counts, int32) and solves the same placement on its own stream,
// beside the scatter and the experts; the gather waits for it. The simulator takes the solve
// as hidden, as the paper's Sec. 4 has it; the runtime runs the real solve there. Beside it,
// the baseline's aux loss with samples moved: each member's sums per home rank (P (1 + 2E)
// doubles). Returns the solve per rank (kNone: none).
std::vector<OpId> build_placement(BuildContext& ctx) {
  const double samples = ctx.setup.model.micro_batch, experts = ctx.setup.model.experts;
  const Label counts = ctx.label(OpRole::kPlacementCountsAllGather, "netmoe");
  const Frontier gathered = group_step(ctx, ctx.groups.ep, OpKind::kAllGather,
                                       gathered_bytes(ctx, 4.0 * samples * (1.0 + experts)),
                                       kTokenStream, counts, ctx.ready);
  std::vector<double> aux;  // AllGather output: P members' P (1 + 2E) doubles
  for (const auto& g : ctx.groups.ep)
    aux.push_back(std::pow(double(g.size()), 2) * 8.0 * (1.0 + 2.0 * experts));
  group_step(ctx, ctx.groups.ep, OpKind::kAllGather, aux, kTokenStream,
             ctx.label(OpRole::kPlacementAuxAllGather, "netmoe"), ctx.ready);
  std::vector<OpId> solved(ctx.world(), kNone);
  for (int r = 0; r < ctx.world(); ++r)
    if (ctx.active(r))
      solved[r] = ctx.schedule.add_compute(
          r, kPlacementStream, 0, 0, ctx.label(OpRole::kPlacementSolve, "netmoe"), gathered[r]);
  return solved;
}

}  // namespace

std::vector<OpId> build_targets_gather(BuildContext& ctx) {
  std::vector<OpId> out(ctx.world(), kNone);
  if (ctx.strategy.placement != Placement::kNetMoe || !ctx.setup.lm_head) return out;
  // Labelled with the stage's last block, whose output the head's targets follow.
  Label label = ctx.label(OpRole::kPlacementTargetsAllGather, "netmoe");
  label.layer = ctx.layer_end - 1;
  const Frontier f =
      group_step(ctx, ctx.groups.ep, OpKind::kAllGather, gathered_bytes(ctx, 4.0 * ctx.work.tokens),
                 kTokenStream, label, ctx.ready);
  return last_of(f);
}

std::vector<double> uniform_pairs(int n, double bytes) {
  return std::vector<double>(size_t(n) * n, bytes / n);
}

std::vector<double> transposed(const std::vector<double>& pairs, int n) {
  std::vector<double> out(pairs.size());
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j) out[size_t(j) * n + i] = pairs[size_t(i) * n + j];
  return out;
}

// a2a=dedup: the rows once per (token, member) and per (token, node), from the model's router
// (balanced routing, node-limited by router_groups / router_group_top_k; dedup_traffic.h). `bytes`:
// one rank's dispatch bytes, one row per (token, expert), so bytes / top_k per token.
void add_dedup(const LayerSetup& setup, const core::RankGroups& groups, double bytes,
               TokenPath& path) {
  const Strategy& s = setup.strategy;
  if (s.placement == Placement::kNetMoe || s.expert_transfer == ExpertTransfer::kHybrid ||
      !setup.a2a_pair_bytes.empty())
    throw Error("strategy: a2a",
                "a2a=dedup prices balanced routing over the experts' home ranks; it does not "
                "compose with placement=netmoe, expert_transfer=hybrid or measured pair bytes");
  const core::ModelConfig& m = setup.model;
  const RouterShape router{m.experts, int(m.top_k), m.router_groups, m.router_group_top_k};
  const int ranks_per_node = setup.cluster.levels.empty() ? 1 : setup.cluster.levels.back().count;
  for (const auto& g : groups.ep) {
    DedupMatrices d = dedup_matrices(router, g, ranks_per_node, bytes / double(m.top_k));
    path.dedup_pairs.push_back(std::move(d.pair));
    path.dedup_nodes.push_back(std::move(d.node));
  }
}

TokenPath make_token_path(const LayerSetup& setup, const core::RankGroups& groups,
                          const LayerWorkload& work,
                          const std::vector<std::vector<int>>& hybrid_orders) {
  check_parallel(setup);
  const auto& p = setup.parallel;
  const Strategy& s = setup.strategy;
  const bool drop = s.tp_dispatch == TpDispatch::kDropAllGather && p.tp > 1;
  TokenPath path;
  path.a2a_fraction = drop ? 1.0 / p.tp : 1.0;  // MoNTA Eq. 8: I / t per rank
  path.esp_gather = p.esp > 1 && (drop || p.tp == 1);
  path.esp_allreduce = p.esp > 1 && !path.esp_gather;
  path.tp_gather = drop;
  const double bytes = work.a2a_bytes * path.a2a_fraction;
  // Routed matrices when given (NetMoE's placement, or measured routing at home placement),
  // required for placement=netmoe; uniform routing otherwise.
  if (s.placement == Placement::kNetMoe || !setup.a2a_pair_bytes.empty()) {
    path.dispatch =
        scaled(netmoe_pairs(setup.a2a_pair_bytes, groups, "a2a_pair_bytes"), path.a2a_fraction);
  } else {
    for (const auto& g : groups.ep)
      path.dispatch.push_back(uniform_pairs(static_cast<int>(g.size()), bytes));
  }
  if (s.expert_transfer == ExpertTransfer::kHybrid) {
    for (size_t k = 0; k < groups.ep.size(); ++k) {
      const int n = static_cast<int>(groups.ep[k].size());
      if (n % s.hybrid_domain != 0)
        throw Error("strategy: hybrid_domain",
                    "must divide the EP size " + str(n) + ", got " + str(s.hybrid_domain));
      path.dispatch[k] =
          hybrid_pairs(path.dispatch[k], n, s.hybrid_domain,
                       k < hybrid_orders.size() ? hybrid_orders[k] : std::vector<int>{});
    }
  }
  if (setup.a2a_combine_pair_bytes.empty()) {
    for (size_t k = 0; k < groups.ep.size(); ++k)
      path.combine.push_back(transposed(path.dispatch[k], static_cast<int>(groups.ep[k].size())));
  } else {
    if (setup.a2a_pair_bytes.empty() || s.expert_transfer == ExpertTransfer::kHybrid)
      throw Error("a2a_combine_pair_bytes",
                  "needs a2a_pair_bytes (the dispatch) and no expert transfer");
    path.combine =
        scaled(netmoe_pairs(setup.a2a_combine_pair_bytes, groups, "a2a_combine_pair_bytes"),
               path.a2a_fraction);
  }
  path.expert_scale = expert_scale(path, groups, bytes, p.world());
  if (s.a2a == Algorithm::kDedup) add_dedup(setup, groups, bytes, path);
  return path;
}

void build_moe(BuildContext& ctx) {
  const int n = ctx.chunks();
  const bool pipelined = ctx.strategy.pipeline_experts || n == 1;
  const bool netmoe = ctx.strategy.placement == Placement::kNetMoe;
  const std::vector<OpId> solved = netmoe && ctx.phase == Phase::kForward
                                       ? build_placement(ctx)
                                       : std::vector<OpId>(ctx.world(), kNone);
  std::vector<Frontier> c(n, ctx.ready);
  a2a_chunks(ctx, c, false);
  const std::vector<OpId> window = last_of(c.back());
  if (ctx.path.esp_gather)
    gather_chunks(ctx, c, ctx.groups.esp, per_group(ctx.groups.esp, per_rank_a2a(ctx, true), true),
                  OpRole::kDispatchEspAllGather, OpRole::kDispatchEspAllGatherCopy, pipelined,
                  TokenDirection::kDispatch);
  expert_chunks(ctx, c, pipelined);
  if (ctx.phase == Phase::kBackward) {
    LayerGrads& g = ctx.grads[ctx.layer];
    g.window = window;
    // HybridEP: the copies' gradients go home once per step, after the last micro-batch.
    const bool hybrid = ctx.strategy.expert_transfer == ExpertTransfer::kHybrid;
    g.expert_ready = hybrid && ctx.last_micro_batch ? build_hybrid_grad_return(ctx, merge(c))
                                                    : last_of(merge(c));
  }
  reduce_chunks(ctx, c);
  for (int r = 0; r < ctx.world(); ++r)  // NetMoE Alg. 1 line 13: the gather needs the placement
    if (solved[r] != kNone) c.front()[r].push_back(solved[r]);
  a2a_chunks(ctx, c, true);
  if (ctx.path.tp_gather)  // the TP ranks' slices back to the full (replicated) tokens
    gather_chunks(ctx, c, ctx.groups.tp, per_group(ctx.groups.tp, per_rank_a2a(ctx, false), true),
                  OpRole::kCombineTpAllGather, OpRole::kCombineTpAllGatherCopy, pipelined,
                  TokenDirection::kCombine);
  ctx.ready = merge(c);
}

}  // namespace moecomm::sched
