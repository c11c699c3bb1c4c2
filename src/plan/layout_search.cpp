#include "plan/layout_search.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <tuple>

#include "core/error.h"
#include "sched/pipeline_order.h"

namespace moecomm::plan {

namespace {

using Clock = std::chrono::steady_clock;

std::vector<int> divisors(int n) {
  std::vector<int> out;
  for (int d = 1; d <= n; ++d)
    if (n % d == 0) out.push_back(d);
  return out;
}

int devices_per_node(const core::Cluster& cluster) {
  int n = 1;
  for (size_t i = 1; i < cluster.levels.size(); ++i) n *= cluster.levels[i].count;
  return n;
}

std::string schedule_name(const Layout& l) {
  return sched::pp_schedule_name(l.pipeline);
}

std::string layout_name(const Layout& l) {
  return layout_string(l.parallel) + " M=" + std::to_string(l.micro_batches) + " " +
         schedule_name(l);
}

// The whole layout's memory on the stage the knobs leave heaviest.
PlanInput memory_input(const PlanInput& in, const Layout& l) {
  PlanInput at = in;
  at.parallel = l.parallel;
  at.model.micro_batches = l.micro_batches;
  at.whole = WholeLayout{at.model, l.parallel, l.pipeline};
  return at;
}

MemoryBreakdown layout_memory(const PlanInput& in, const Layout& l, bool recompute_experts) {
  sched::Strategy knobs;
  knobs.zero = in.zero;
  knobs.recompute_experts = recompute_experts;
  return device_memory(memory_input(in, l), knobs);
}

// One pipeline stage alone (pp = 1, one micro-batch, MoE blocks), its memory the whole layout's.
PlanInput stage_input(const PlanInput& in, const Layout& l) {
  PlanInput sub = memory_input(in, l);
  sub.cluster = stage_cluster(in.cluster, l.parallel.world() / l.parallel.pp);
  sub.parallel.pp = 1;
  sub.model.micro_batches = 1;
  sub.model.dense_layers = 0;
  return sub;
}

// Forward flops per token of one layer: attention's projections and scores (4 s h), and the
// FFN part (dense, or the gate, shared and top_k routed experts).
double attention_flops(const core::ModelConfig& m) {
  return 2.0 * m.attention_params() + 4.0 * double(m.seq_len) * m.hidden;
}
double moe_flops(const core::ModelConfig& m) {
  return attention_flops(m) + 2.0 * (double(m.hidden) * m.experts + m.shared_expert_params() +
                                     double(m.top_k) * m.expert_params());
}
double dense_flops(const core::ModelConfig& m) {
  return attention_flops(m) + 2.0 * m.dense_ffn_params();
}

// Per stage: MoE and dense blocks (sched::split_layers over pp x V parts).
struct StageLayers {
  int moe = 0, dense = 0;
};
std::vector<StageLayers> stage_layers(const core::ModelConfig& m, const Layout& l) {
  const int pp = l.parallel.pp;
  const int chunks =
      l.pipeline.pp_schedule == sched::PpSchedule::kInterleaved ? l.pipeline.virtual_stages : 1;
  const std::vector<int> off = sched::layer_offsets(
      sched::split_layers(static_cast<int>(m.layers), pp * chunks, "layout: layers"));
  std::vector<StageLayers> out(pp);
  for (int s = 0; s < pp; ++s)
    for (int c = 0; c < chunks; ++c) {
      const int v = sched::virtual_stage(s, c, pp);
      for (int layer = off[v]; layer < off[v + 1]; ++layer)
        (layer < m.dense_layers ? out[s].dense : out[s].moe) += 1;
    }
  return out;
}

// One hand-off of a micro-batch's activations between stages: b s h / cp, split over the TP
// ranks (Megatron's scatter/gather, Narayanan et al. 2021 Sec. 4.1), over the outermost level
// two consecutive stages differ in, each device getting its share of that level's bandwidth.
double hop_time(const PlanInput& in, const Layout& l) {
  if (l.parallel.pp == 1) return 0;
  const auto& m = in.model;
  const int stage_ranks = l.parallel.world() / l.parallel.pp;
  const double bytes = double(m.micro_batch) * (m.seq_len / l.parallel.cp) * m.hidden *
                       m.dtype_bytes / l.parallel.tp;
  int span = 1;  // devices in one worker of level i
  std::vector<int> spans(in.cluster.levels.size());
  for (size_t i = in.cluster.levels.size(); i-- > 0;) {
    spans[i] = span;
    span *= in.cluster.levels[i].count;
  }
  for (size_t i = 0; i < spans.size(); ++i)
    if (spans[i] <= stage_ranks) {
      const core::Level& level = in.cluster.levels[i];
      return level.latency + bytes / (level.bandwidth / spans[i]);
    }
  return 0;
}

struct Composed {
  double stage_s = 0, hop_s = 0, sync_s = 0, step_s = 0;
};

// The pipeline formula of kLayoutPricing from one MoE block's forward + backward (block_s), its
// backward alone and its exposed gradient-sync tail.
Composed compose(const PlanInput& in, const Layout& l, double block_s, double backward_s,
                 double tail_s) {
  const auto& m = in.model;
  const auto& p = l.parallel;
  const core::Device& d = in.cluster.device;
  const double rate = d.peak_flops(m.compute()) * d.compute_efficiency;
  const double dense_block_s = block_s * dense_flops(m) / moe_flops(m);
  const double head_s = 6.0 * double(m.micro_batch) * (m.seq_len / p.cp) * m.hidden *
                        double(m.vocab_size) / p.tp / rate;
  Composed c;
  int most_moe = 0, most_layers = 0;
  const std::vector<StageLayers> stages = stage_layers(m, l);
  for (int s = 0; s < p.pp; ++s) {
    const double t =
        stages[s].moe * block_s + stages[s].dense * dense_block_s + (s == p.pp - 1 ? head_s : 0.0);
    c.stage_s = std::max(c.stage_s, t);
    most_moe = std::max(most_moe, stages[s].moe);
    most_layers = std::max(most_layers, stages[s].moe + stages[s].dense);
  }
  c.hop_s = hop_time(in, l);
  c.sync_s = std::max(tail_s, most_moe * tail_s - (most_layers - 1) * backward_s);
  const double M = double(l.micro_batches);
  const double bubble = l.pipeline.pp_schedule == sched::PpSchedule::kInterleaved
                            ? double(p.pp - 1) / l.pipeline.virtual_stages
                            : double(p.pp - 1);
  c.step_s = (M + bubble) * c.stage_s + 2.0 * (p.pp - 1) * c.hop_s + c.sync_s;
  return c;
}

// MoNTA's priority (EP > PP > CP > DP on the fastest links): the nodes each group spans in
// Megatron-Core's fold (tp/esp fastest), EP first; smaller is better.
std::tuple<int, int, int, int> monta_priority(const core::ParallelConfig& p, int node) {
  auto nodes = [node](int ranks) { return (ranks + node - 1) / node; };
  const int stage = p.world() / p.pp;
  return {nodes(p.esp * p.ep), stage >= node ? 1 : 0, nodes(p.tp * p.cp),
          nodes(p.tp * p.cp * p.dp)};
}

double model_flops_per_token(const core::ModelConfig& m) {
  return 6.0 * m.active_params() + 12.0 * double(m.layers) * m.hidden * m.seq_len;
}

struct Ranked {
  Layout layout;
  bool recompute_experts = false;  // the least the layout needs to fit
  double estimate_s = 0;
  std::tuple<int, int, int, int> priority;
};

}  // namespace

std::string layout_string(const core::ParallelConfig& p) {
  return "tp=" + std::to_string(p.tp) + ",cp=" + std::to_string(p.cp) +
         ",pp=" + std::to_string(p.pp) + ",dp=" + std::to_string(p.dp) +
         ",ep=" + std::to_string(p.ep) + ",esp=" + std::to_string(p.esp) +
         ",edp=" + std::to_string(p.edp);
}

core::Cluster stage_cluster(const core::Cluster& cluster, int ranks) {
  core::Cluster out = cluster;
  int left = ranks;
  for (size_t i = out.levels.size(); i-- > 0;) {
    core::Level& level = out.levels[i];
    if (left >= level.count) {
      if (left % level.count != 0)
        throw Error("stage cluster",
                    std::to_string(ranks) + " ranks do not split into whole groups of " +
                        std::to_string(level.count) + " (the " + level.name + " level's count)");
      left /= level.count;
    } else {
      if (level.count % left != 0)
        throw Error("stage cluster", std::to_string(ranks) + " ranks do not divide the " +
                                         level.name + " level's count " +
                                         std::to_string(level.count));
      level.count = left;
      left = 1;
    }
  }
  if (left != 1)
    throw Error("stage cluster", std::to_string(ranks) + " ranks exceed the cluster's " +
                                     std::to_string(cluster.world_size()));
  out.name = cluster.name + "[" + std::to_string(ranks) + " ranks]";
  return out;
}

std::vector<core::ParallelConfig> enumerate_parallel(const core::ModelConfig& m,
                                                     const core::Cluster& cluster) {
  const int world = cluster.world_size();
  const int node = devices_per_node(cluster);
  std::vector<core::ParallelConfig> out;
  for (int pp : divisors(world)) {
    if (pp > m.layers) continue;
    const int stage = world / pp;
    for (int tp : divisors(stage)) {
      if (node % tp != 0 || m.heads % tp != 0 || m.kv_head_count() % tp != 0) continue;
      for (int cp : divisors(stage / tp)) {
        if (m.seq_len % cp != 0) continue;
        const int dp = stage / (tp * cp);
        for (int esp : divisors(stage)) {
          if (node % esp != 0 || m.ffn_hidden % esp != 0) continue;
          for (int ep : divisors(stage / esp)) {
            if (m.experts % ep != 0) continue;
            core::ParallelConfig p;
            p.tp = tp, p.cp = cp, p.dp = dp, p.pp = pp, p.esp = esp, p.ep = ep;
            p.edp = stage / (esp * ep);
            out.push_back(p);
          }
        }
      }
    }
  }
  return out;
}

std::vector<Layout> enumerate_layouts(const core::ModelConfig& m, const core::Cluster& cluster,
                                      std::int64_t global_batch) {
  if (global_batch < 1 || global_batch % m.micro_batch != 0)
    throw Error("--global-batch", "must be a positive multiple of the micro-batch size " +
                                      std::to_string(m.micro_batch) + ", got " +
                                      std::to_string(global_batch));
  const std::int64_t micro_batches_in_all = global_batch / m.micro_batch;
  std::vector<Layout> out;
  for (const core::ParallelConfig& p : enumerate_parallel(m, cluster)) {
    if (micro_batches_in_all % p.dp != 0) continue;
    Layout l;
    l.parallel = p;
    l.micro_batches = micro_batches_in_all / p.dp;
    out.push_back(l);  // 1f1b (the Strategy default)
    if (p.pp == 1 || l.micro_batches % p.pp != 0) continue;
    for (int v = 2; p.pp * v <= m.layers; ++v) {
      l.pipeline.pp_schedule = sched::PpSchedule::kInterleaved;
      l.pipeline.virtual_stages = v;
      out.push_back(l);
    }
  }
  return out;
}

LayoutSearch search_layouts(const PlanInput& in, const LayoutSearchOptions& o) {
  if (!(o.budget_s >= 0 && std::isfinite(o.budget_s)))
    throw Error("--budget-s", "must be a finite number of seconds >= 0");
  if (o.max_layouts < 1)
    throw Error("--max-layouts", "must be at least 1, got " + std::to_string(o.max_layouts));
  const auto start = Clock::now();
  auto elapsed = [&start] { return std::chrono::duration<double>(Clock::now() - start).count(); };
  LayoutSearch out;
  out.budget_s = o.budget_s;
  const std::vector<Layout> layouts = enumerate_layouts(in.model, in.cluster, o.global_batch);
  out.enumerated = static_cast<int>(layouts.size());
  if (layouts.empty())
    throw Error("--global-batch", "no data-parallel size of the cluster divides " +
                                      std::to_string(o.global_batch) +
                                      " sequences into micro-"
                                      "batches of " +
                                      std::to_string(in.model.micro_batch));
  const double capacity = in.cluster.device.memory_bytes;
  // The memory filter, and the analytical pre-estimate of the layouts that fit.
  std::vector<Ranked> ranked;
  std::optional<Shortfall> least;
  const int node = devices_per_node(in.cluster);
  for (const Layout& l : layouts) {
    Ranked r{l, false, 0, monta_priority(l.parallel, node)};
    MemoryBreakdown mem = layout_memory(in, l, false);
    if (mem.total() > capacity) {
      r.recompute_experts = true;
      mem = layout_memory(in, l, true);
    }
    if (mem.total() > capacity) {
      if (!least || mem.total() < least->memory.total())
        least = Shortfall{layout_name(l), mem, 0, capacity};
      continue;
    }
    ranked.push_back(r);
  }
  out.fitting = static_cast<int>(ranked.size());
  if (ranked.empty()) {
    out.shortfall = least;
    out.wall_s = elapsed();
    return out;
  }
  std::map<std::string, double> estimate_of;  // by parallel configuration
  for (Ranked& r : ranked) {
    const std::string key = layout_string(r.layout.parallel);
    auto it = estimate_of.find(key);
    if (it == estimate_of.end()) {
      const StrategyEstimate e = estimate_baseline_layer(stage_input(in, r.layout));
      it = estimate_of.emplace(key, e.total_s()).first;
    }
    r.estimate_s = compose(in, r.layout, it->second, it->second / 2, 0).step_s;
  }
  // Best estimate first; within 2% of each other MoNTA's priority decides.
  auto bucket = [](double s) { return std::floor(std::log(s) / std::log(1.02)); };
  std::stable_sort(ranked.begin(), ranked.end(), [&](const Ranked& a, const Ranked& b) {
    const double ba = bucket(a.estimate_s), bb = bucket(b.estimate_s);
    if (ba != bb) return ba < bb;
    if (a.priority != b.priority) return a.priority < b.priority;
    return a.estimate_s < b.estimate_s;
  });
  // The knob search of each parallel configuration, best ranked first, within the budget.
  std::vector<std::string> order;
  for (const Ranked& r : ranked) {
    const std::string key = layout_string(r.layout.parallel);
    if (std::find(order.begin(), order.end(), key) == order.end()) order.push_back(key);
  }
  const int to_simulate = std::min<int>(o.max_layouts, static_cast<int>(order.size()));
  for (int i = 0; i < to_simulate; ++i) {
    const double left = o.budget_s - elapsed();
    if (left <= 0) {
      out.budget_spent = true;
      break;
    }
    const Ranked* first = nullptr;
    for (const Ranked& r : ranked)
      if (layout_string(r.layout.parallel) == order[i]) {
        first = &r;
        break;
      }
    const PlanInput sub = stage_input(in, first->layout);
    SearchOptions so;
    so.layers = 1;
    so.budget_s = left / (to_simulate - i);
    Plan plan;
    try {
      plan = make_plan(sub, so);
    } catch (const Error& e) {  // no method's schedule builds on this layout
      ++out.refused;
      if (o.progress) o.progress("plan: layout " + order[i] + " refused: " + e.what() + "\n");
      continue;
    }
    ++out.simulated;
    out.simulations += plan.search.candidates;
    // Rows fastest first; each layout of this configuration takes the fastest that fits it.
    std::vector<const PlanRow*> rows;
    for (const PlanRow& row : plan.rows) rows.push_back(&row);
    std::stable_sort(rows.begin(), rows.end(), [](const PlanRow* a, const PlanRow* b) {
      return a->simulated.step_s < b->simulated.step_s;
    });
    for (const Ranked& r : ranked) {
      if (layout_string(r.layout.parallel) != order[i]) continue;
      for (const PlanRow* row : rows) {
        // The row's MoE sizes (Lina packs its experts) on the whole layout.
        PlanInput at = memory_input(in, r.layout);
        core::ParallelConfig& whole = at.whole->parallel;
        whole.ep = row->candidate.parallel.ep;
        whole.esp = row->candidate.parallel.esp;
        whole.edp = whole.world() / (whole.pp * whole.esp * whole.ep);
        const MemoryBreakdown mem = device_memory(at, row->candidate.strategy);
        const double other = row->memory_bytes - row->memory.total();
        if (mem.total() + other > capacity) continue;
        const PricedStep& t = row->simulated;
        const double tail = std::max(0.0, t.step_s - t.forward_s - t.backward_s);
        const Composed c = compose(in, r.layout, t.forward_s + t.backward_s, t.backward_s, tail);
        LayoutRow lr;
        lr.layout = r.layout;
        lr.layout.parallel = at.whole->parallel;
        lr.memory = mem;
        lr.estimate_s = r.estimate_s;
        lr.knobs = row->candidate.strategy;
        lr.block_s = t.forward_s + t.backward_s;
        lr.stage_s = c.stage_s;
        lr.hop_s = c.hop_s;
        lr.sync_s = c.sync_s;
        lr.step_s = c.step_s;
        const double tokens = double(o.global_batch) * in.model.seq_len;
        lr.tokens_per_s = tokens / c.step_s;
        lr.mfu =
            tokens * model_flops_per_token(in.model) /
            (c.step_s * in.cluster.world_size() * in.cluster.device.peak_flops(in.model.compute()));
        out.rows.push_back(std::move(lr));
        break;
      }
    }
    if (o.progress) {
      char line[256];
      std::snprintf(line, sizeof line, "plan: layout %d/%d %s simulated, %.1f s elapsed\n", i + 1,
                    to_simulate, order[i].c_str(), elapsed());
      o.progress(line);
    }
  }
  out.unsimulated = static_cast<int>(order.size()) - out.simulated - out.refused;
  // One row per parallel layout: its fastest schedule (Lina's packing may map two
  // configurations onto one).
  std::stable_sort(out.rows.begin(), out.rows.end(),
                   [](const LayoutRow& a, const LayoutRow& b) { return a.step_s < b.step_s; });
  std::vector<LayoutRow> best;
  for (LayoutRow& r : out.rows) {
    const std::string key = layout_string(r.layout.parallel);
    if (std::none_of(best.begin(), best.end(), [&key](const LayoutRow& b) {
          return layout_string(b.layout.parallel) == key;
        }))
      best.push_back(std::move(r));
  }
  out.rows = std::move(best);
  out.wall_s = elapsed();
  return out;
}

namespace {

nlohmann::json memory_json(const MemoryBreakdown& m) {
  return {{"stage", m.stage},
          {"weights_GB", m.weights / 1e9},
          {"gradients_GB", m.gradients / 1e9},
          {"optimizer_states_GB", m.optimizer_states / 1e9},
          {"activations_GB", m.activations / 1e9}};
}

}  // namespace

nlohmann::json layout_search_to_json(const LayoutSearch& s, const PlanInput& in,
                                     std::int64_t global_batch) {
  nlohmann::json rows = nlohmann::json::array();
  for (const LayoutRow& r : s.rows)
    rows.push_back({{"layout", layout_string(r.layout.parallel)},
                    {"parallel", r.layout.parallel.to_json()},
                    {"micro_batches", r.layout.micro_batches},
                    {"pp_schedule", schedule_name(r.layout)},
                    {"strategy", sched::to_string(r.knobs)},
                    {"step_ms", r.step_s * 1e3},
                    {"tokens_per_s", r.tokens_per_s},
                    {"mfu", r.mfu},
                    {"memory_GB", r.memory.total() / 1e9},
                    {"memory", memory_json(r.memory)},
                    {"estimate_ms", r.estimate_s * 1e3},
                    {"block_ms", r.block_s * 1e3},
                    {"stage_ms", r.stage_s * 1e3},
                    {"hop_ms", r.hop_s * 1e3},
                    {"sync_ms", r.sync_s * 1e3}});
  return {{"model", in.model.name},
          {"cluster", in.cluster.name},
          {"world", in.cluster.world_size()},
          {"global_batch", global_batch},
          {"micro_batch", in.model.micro_batch},
          {"seq_len", in.model.seq_len},
          {"zero", in.zero},
          {"recompute", in.recompute},
          {"pricing", kLayoutPricing},
          {"mfu_formula", kMfuFormula},
          {"enumerated", s.enumerated},
          {"fitting", s.fitting},
          {"simulated", s.simulated},
          {"simulations", s.simulations},
          {"unsimulated", s.unsimulated},
          {"refused", s.refused},
          {"budget_s", s.budget_s},
          {"wall_s", s.wall_s},
          {"budget_spent", s.budget_spent},
          {"recommended", s.rows.empty()
                              ? nlohmann::json(nullptr)
                              : nlohmann::json(layout_string(s.rows.front().layout.parallel))},
          {"shortfall", s.shortfall ? shortfall_to_json(*s.shortfall) : nlohmann::json(nullptr)},
          {"layouts", rows}};
}

}  // namespace moecomm::plan
