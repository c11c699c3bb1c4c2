// moecomm._moecomm.build_schedule: the training step's schedule (plan::build_step,
// the one `moecomm sim` simulates and `moecomm train` runs) as Python objects, for the torch
// executor (moecomm.torch) to run op by op, and the simulator's time for each op beside it.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "bindings.h"
#include "core/cluster.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/rank_groups.h"
#include "core/topology.h"
#include "inputs.h"
#include "plan/step_service.h"
#include "routing_args.h"
#include "sched/build_hybridep.h"
#include "sched/executor_caps.h"
#include "sched/layer_builder.h"
#include "sched/policy.h"
#include "sim/simulator.h"

namespace py = pybind11;

namespace moecomm::python {

namespace {

// A schedule with what built it: the cluster simulates it, the layout and strategy describe it.
struct BuiltSchedule {
  sched::Schedule schedule{1};
  core::Cluster cluster;
  core::ModelConfig model;
  core::ParallelConfig parallel;
  std::string strategy;
  sched::Strategy knobs;  // the strategy as built, for the executors' refusals
  std::vector<std::string> strategy_notes;
  bool hybrid = false;                     // expert_transfer=hybrid
  int hybrid_domain = 1;                   // HybridEP S_ED
  std::vector<core::RankGroup> ep_groups;  // world ranks of every EP group
  // Per EP group: position -> EP member index (HybridEP's location renumbering; identity
  // without it). Domains are hybrid_domain consecutive positions.
  std::vector<std::vector<int>> ep_orders;
};

void set_ep_orders(const sched::LayerSetup& layer, BuiltSchedule& out) {
  const core::RankGroups groups = core::build_rank_groups(layer.parallel);
  out.ep_groups = groups.ep;
  out.hybrid = layer.strategy.expert_transfer == sched::ExpertTransfer::kHybrid;
  out.hybrid_domain = out.hybrid ? layer.strategy.hybrid_domain : 1;
  const std::vector<std::vector<int>> orders =
      out.hybrid ? sched::hybrid_orders(layer, groups) : std::vector<std::vector<int>>{};
  for (size_t k = 0; k < groups.ep.size(); ++k) {
    std::vector<int> order(groups.ep[k].size());
    for (size_t p = 0; p < order.size(); ++p) order[p] = int(p);
    if (k < orders.size() && !orders[k].empty()) order = orders[k];
    out.ep_orders.push_back(order);
  }
}

// One op, flattened for Python (Op's fields with its label and stream name resolved).
struct PyOp {
  int id = 0, rank = 0, stream = 0, priority = 0, layer = -1, chunk = -1;
  int collective = -1, member = -1, peer = -1, tag = 0;
  std::string kind, name, phase, knob, stream_name;
  sched::OpRole role = sched::OpRole::kAttention;
  bool yields_to_traffic = false, waits_for_micro_ops = false;  // sched/policy.h
  double flops = 0, bytes = 0;
  int prev = -1;
  std::vector<int> deps;
};

struct PyCollective {
  int id = 0, root = -1, priority = 0;
  std::string kind, algorithm, name;
  sched::OpRole role = sched::OpRole::kAttention;
  std::vector<int> group;
  double bytes = 0;
  std::vector<double> pair_bytes;
  sched::WireCodec codec;
};

PyOp op_of(const sched::Schedule& s, sched::OpId id) {
  const sched::Op& op = s.op(id);
  const sched::Label& label = s.label(id);
  PyOp p;
  p.id = id;
  p.rank = op.rank;
  p.stream = op.stream;
  p.priority = op.priority;
  p.layer = label.layer;
  p.chunk = label.chunk;
  p.collective = op.collective;
  p.member = op.member;
  p.peer = op.peer;
  p.tag = op.tag;
  p.kind = std::string(sched::to_string(op.kind));
  p.name = std::string(label.name());
  p.role = label.role;
  p.yields_to_traffic = sched::yields_to_traffic(op);
  p.waits_for_micro_ops = sched::waits_for_micro_ops(op);
  p.phase = std::string(sched::to_string(label.phase));
  p.knob = label.knob;
  p.stream_name = s.stream_name(op.stream);
  p.flops = op.flops;
  p.bytes = op.bytes;
  p.prev = op.prev;
  for (sched::OpId d : s.deps(id)) p.deps.push_back(d);
  return p;
}

PyCollective collective_of(const sched::Schedule& s, sched::CollectiveId id) {
  const sched::Collective& c = s.collective(id);
  PyCollective p;
  p.id = id;
  p.root = c.root;
  p.priority = c.priority;
  p.kind = std::string(sched::to_string(c.kind));
  p.algorithm = std::string(sched::to_string(c.algorithm));
  p.name = std::string(s.labels()[size_t(c.label)].name());
  p.role = s.labels()[size_t(c.label)].role;
  p.group.assign(c.group.begin(), c.group.end());
  p.bytes = c.bytes;
  p.pair_bytes = c.pair_bytes;
  p.codec = c.codec;
  return p;
}

// How the schedule's A2A matrices are sized, as moecomm.simulate takes it: uniform routing, or a
// synthetic routing with data locality whose samples sit where NetMoE's placement puts them
// (placement=netmoe needs it to build its ops; an executor runs its own data's sizes).
struct RoutingArgs {
  std::string routing = "auto";
  double locality = 0.9;
  bool lm_head = false;
};

std::shared_ptr<BuiltSchedule> build(const py::object& model, const py::object& cluster,
                                     const py::object& parallel, const std::string& strategy,
                                     int layers, int64_t seq_len, int64_t micro_batch,
                                     const RoutingArgs& args) {
  if (layers < 0 || layers > core::kMaxLayers)
    throw Error("layers", "must be in [1, " + std::to_string(core::kMaxLayers) +
                              "] (or 0: one "
                              "per pipeline stage), got " +
                              std::to_string(layers));
  plan::StepRequest request;
  request.routing = routing_arg(args.routing, args.locality);
  request.setup = resolve_setup(model, cluster, parallel, seq_len, micro_batch);
  request.ep_given = parallel_spec(parallel).ep.has_value();
  request.strategy = strategy;
  request.layers = layers;
  request.lm_head = args.lm_head;
  request.locality = args.locality;
  request.names = step_arg_names();
  py::gil_scoped_release release;
  const plan::PreparedStep step = plan::prepare_step(request);
  auto out = std::make_shared<BuiltSchedule>();
  out->strategy_notes = step.notes;
  out->schedule = plan::build_step(step);
  out->cluster = step.layer.cluster;
  out->model = step.layer.model;
  out->parallel = step.layer.parallel;
  out->strategy = sched::to_string(step.layer.strategy);
  out->knobs = step.layer.strategy;
  set_ep_orders(step.layer, *out);
  return out;
}

sched::Executor executor_arg(const std::string& name) {
  if (const auto e = sched::executor_from_string(name)) return *e;
  throw Error("executor", "'" + name + "' is not rt, torch_layer or torch_sample_moving");
}

// The simulator's start and end of every op, seconds, indexed by op id.
std::vector<std::pair<double, double>> simulated_times(const BuiltSchedule& b,
                                                       double compute_efficiency) {
  if (compute_efficiency != 0 && !(compute_efficiency >= 0.01 && compute_efficiency <= 1))
    throw Error("compute_efficiency", "must be in [0.01, 1] (or 0: the device's)");
  py::gil_scoped_release release;
  const core::Topology topology(b.cluster);
  sim::SimOptions options;
  if (compute_efficiency > 0) options.compute_efficiency = compute_efficiency;
  const sim::SimResult result = sim::simulate(b.schedule, topology, options);
  std::vector<std::pair<double, double>> out;
  out.reserve(result.ops.size());
  for (const sim::OpTiming& t : result.ops) out.emplace_back(t.start, t.end);
  return out;
}

// Python's name of a role: its dotted name without "moe.", dots as underscores
// (OpRole.dispatch_a2a for "moe.dispatch.a2a"), so the one table names both.
std::string python_name(sched::OpRole role) {
  std::string n(sched::to_string(role));
  if (n.rfind("moe.", 0) == 0) n.erase(0, 4);
  std::replace(n.begin(), n.end(), '.', '_');
  return n;
}

void bind_roles(py::module_& m) {
  py::enum_<sched::OpFamily> family(m, "OpFamily", "the part of the step a role belongs to");
  for (auto f :
       {sched::OpFamily::kDense, sched::OpFamily::kDenseComm, sched::OpFamily::kPipeline,
        sched::OpFamily::kTokenPath, sched::OpFamily::kPlacement, sched::OpFamily::kExpertTransfer,
        sched::OpFamily::kGradSync, sched::OpFamily::kOptimizer})
    family.value(std::string(sched::to_string(f)).c_str(), f);
  py::enum_<sched::OpRole> role(m, "OpRole", "what an op is for (sched::OpRole)");
  for (int i = 0; i < sched::kNumOpRoles; ++i) {
    const auto r = static_cast<sched::OpRole>(i);
    role.value(python_name(r).c_str(), r);
  }
  role.def_property_readonly("label_name",
                             [](sched::OpRole r) { return std::string(sched::to_string(r)); });
  role.def_property_readonly("family", [](sched::OpRole r) { return sched::family(r); });
}

void bind_op(py::module_& m) {
  bind_roles(m);
  py::class_<PyOp>(m, "ScheduleOp", "one op of a schedule (sched::Op with its label)")
      .def_readonly("id", &PyOp::id)
      .def_readonly("rank", &PyOp::rank)
      .def_readonly("stream", &PyOp::stream)
      .def_readonly("stream_name", &PyOp::stream_name)
      .def_readonly("priority", &PyOp::priority)
      .def_readonly("kind", &PyOp::kind, "compute, copy, send, recv, all_to_all, ...")
      .def_readonly("name", &PyOp::name, "the role's name, e.g. moe.dispatch.a2a (for display)")
      .def_readonly("role", &PyOp::role, "what the op is for: executors bind by it")
      .def_readonly("yields_to_traffic", &PyOp::yields_to_traffic,
                    "a Lina micro-op: waits while a collective of priority >= 0 runs")
      .def_readonly("waits_for_micro_ops", &PyOp::waits_for_micro_ops,
                    "a collective that starts only while no micro-op runs on its rank")
      .def_readonly("layer", &PyOp::layer)
      .def_readonly("phase", &PyOp::phase, "forward, backward or none")
      .def_readonly("chunk", &PyOp::chunk, "pipelining chunk, -1: unchunked")
      .def_readonly("knob", &PyOp::knob)
      .def_readonly("flops", &PyOp::flops)
      .def_readonly("bytes", &PyOp::bytes)
      .def_readonly("collective", &PyOp::collective, "collective id, -1: none")
      .def_readonly("member", &PyOp::member, "position of the rank in the collective's group")
      .def_readonly("peer", &PyOp::peer)
      .def_readonly("tag", &PyOp::tag)
      .def_readonly("prev", &PyOp::prev, "the op before it on its stream, -1: none")
      .def_readonly("deps", &PyOp::deps, "ops of other streams it waits for")
      .def("__repr__", [](const PyOp& o) {
        return "ScheduleOp(" + std::to_string(o.id) + ", " + o.kind + ", '" + o.name + "', " +
               o.phase + ", chunk " + std::to_string(o.chunk) + ", stream " +
               std::to_string(o.stream) + ")";
      });
  py::class_<sched::WireCodec>(m, "WireCodec",
                               "how a collective's payload travels (sched::WireCodec); its bytes "
                               "are already the encoded bytes")
      .def_property_readonly(
          "dtype", [](const sched::WireCodec& c) { return std::string(core::to_string(c.dtype)); },
          "element type on the wire, e.g. fp32 or bf16")
      .def_readonly("compression", &sched::WireCodec::compression,
                    "HybridEP SR's encoded bytes per dense byte (1: sent as it is)")
      .def_readonly("shared_reference", &sched::WireCodec::shared_reference,
                    "SR residuals against the shared expert (else against zero)")
      .def_readonly("error_feedback", &sched::WireCodec::error_feedback,
                    "SR error feedback: receivers keep the residual received so far")
      .def("__repr__", [](const sched::WireCodec& c) {
        std::ostringstream os;
        os << "WireCodec(" << core::to_string(c.dtype) << ", compression " << c.compression
           << (c.shared_reference ? ", shared reference" : "")
           << (c.error_feedback ? ", error feedback" : "") << ")";
        return os.str();
      });
  py::class_<PyCollective>(m, "ScheduleCollective", "a collective of a schedule")
      .def_readonly("id", &PyCollective::id)
      .def_readonly("kind", &PyCollective::kind)
      .def_readonly("algorithm", &PyCollective::algorithm, "flat, 1dh, 2dh or ring")
      .def_readonly("name", &PyCollective::name)
      .def_readonly("role", &PyCollective::role)
      .def_readonly("group", &PyCollective::group, "global ranks; member i is group[i]")
      .def_readonly("bytes", &PyCollective::bytes)
      .def_readonly("pair_bytes", &PyCollective::pair_bytes, "A2A: n x n bytes, row-major")
      .def_readonly("root", &PyCollective::root)
      .def_readonly("priority", &PyCollective::priority)
      .def_readonly("codec", &PyCollective::codec, "how its payload travels (WireCodec)");
}

}  // namespace

void bind_sched(py::module_& m) {
  bind_op(m);
  py::class_<BuiltSchedule, std::shared_ptr<BuiltSchedule>>(
      m, "Schedule", "one training step's schedule, as moecomm sim simulates it")
      .def_property_readonly("world_size",
                             [](const BuiltSchedule& b) { return b.schedule.world_size(); })
      .def_property_readonly("num_ops", [](const BuiltSchedule& b) { return b.schedule.num_ops(); })
      .def_readonly("strategy", &BuiltSchedule::strategy, "the full strategy string")
      .def_property_readonly(
          "ranks_per_node",
          [](const BuiltSchedule& b) {
            // Levels outermost first: a node is everything below the outermost level.
            const auto& levels = b.cluster.levels;
            if (levels.size() < 2) return b.schedule.world_size();
            return b.schedule.world_size() / levels.front().count;
          },
          "ranks that share a node (hierarchical A2As group them)")
      .def_readonly("strategy_notes", &BuiltSchedule::strategy_notes)
      .def_property_readonly(
          "cluster",
          [](const BuiltSchedule& b) {
            return std::make_pair(b.cluster.name, core::cluster_to_json(b.cluster).dump());
          },
          "the cluster the schedule was built for, as resolved: (name, its JSON text)")
      .def_property_readonly("parallel",
                             [](const BuiltSchedule& b) {
                               const core::ParallelConfig& p = b.parallel;
                               py::dict d;
                               d["dp"] = p.dp;
                               d["tp"] = p.tp;
                               d["ep"] = p.ep;
                               d["esp"] = p.esp;
                               d["pp"] = p.pp;
                               d["cp"] = p.cp;
                               return d;
                             })
      .def(
          "ops",
          [](const BuiltSchedule& b, int rank) {
            if (rank < 0 || rank >= b.schedule.world_size())
              throw Error("rank", "must be in [0, " + std::to_string(b.schedule.world_size()) +
                                      "), got " + std::to_string(rank));
            std::vector<PyOp> out;
            for (sched::OpId id : b.schedule.ops_of(rank)) out.push_back(op_of(b.schedule, id));
            return out;
          },
          py::arg("rank"), "the rank's ops in the order they were added")
      .def_property_readonly(
          "recompute_experts", [](const BuiltSchedule& b) { return b.knobs.recompute_experts; },
          "whether the backward recomputes the experts' forward instead of keeping their "
          "activations (the strategy's recompute_experts; its backward expert ops are priced "
          "at 3x the forward's flops)")
      .def_property_readonly(
          "a2a_dtype",
          [](const BuiltSchedule& b) -> std::optional<std::string> {
            if (!b.knobs.a2a_dtype) return std::nullopt;
            return sched::to_string(*b.knobs.a2a_dtype);
          },
          "the strategy's a2a_dtype as written (\"bf16\", \"fp8/bf16\": dispatch/combine), "
          "None where the token rows travel as the model's dtype; the token A2As' codecs "
          "carry it")
      .def_readonly("hybrid", &BuiltSchedule::hybrid, "whether experts travel (HybridEP)")
      .def_readonly("hybrid_domain", &BuiltSchedule::hybrid_domain,
                    "HybridEP's domain size S_ED (1 without expert transfer)")
      .def(
          "ep_order",
          [](const BuiltSchedule& b, int rank) {
            for (size_t k = 0; k < b.ep_groups.size(); ++k)
              for (int r : b.ep_groups[k])
                if (r == rank)
                  return std::make_pair(
                      std::vector<int>(b.ep_groups[k].begin(), b.ep_groups[k].end()),
                      b.ep_orders[k]);
            throw Error("rank", "no EP group holds rank " + std::to_string(rank));
          },
          py::arg("rank"),
          "(the rank's EP group in world ranks, position -> member index): HybridEP's "
          "domains are hybrid_domain consecutive positions; the member at position p owns "
          "experts [p L, (p + 1) L)")
      .def(
          "collective",
          [](const BuiltSchedule& b, int id) {
            if (id < 0 || id >= b.schedule.num_collectives())
              throw Error("collective", "no collective " + std::to_string(id));
            return collective_of(b.schedule, id);
          },
          py::arg("id"))
      .def(
          "refusal",
          [](const BuiltSchedule& b, const std::string& executor, float capacity_factor,
             bool token_choice_gate) -> std::optional<std::pair<std::string, std::string>> {
            sched::RunFacts facts;
            facts.tp = b.parallel.tp;
            facts.esp = b.parallel.esp;
            facts.capacity_factor = capacity_factor;
            facts.token_choice_gate = token_choice_gate;
            const auto r = sched::refusal(b.schedule, b.knobs, facts, executor_arg(executor));
            if (!r) return std::nullopt;
            return std::make_pair(r->where, r->why);
          },
          py::arg("executor"), py::arg("capacity_factor") = 0.0f,
          py::arg("token_choice_gate") = true,
          "None where the executor ('rt', 'torch_layer', 'torch_sample_moving') runs this "
          "schedule, else (where, why): the first semantic rule it breaks or the MoE ops it "
          "cannot bind (sched/executor_caps.h, the one table `moecomm train` consults); "
          "capacity_factor 0: dropless")
      .def(
          "unbound_ops",
          [](const BuiltSchedule& b, const std::string& executor) {
            std::vector<py::dict> out;
            for (const sched::Label& l : sched::unbound_ops(b.schedule, executor_arg(executor))) {
              py::dict d;
              d["role"] = l.role;
              d["layer"] = l.layer;
              d["phase"] = std::string(sched::to_string(l.phase));
              d["knob"] = l.knob;
              out.push_back(d);
            }
            return out;
          },
          py::arg("executor"),
          "the MoE ops the executor cannot bind, one per (role, phase, knob) at its first layer")
      .def("simulated_times", &simulated_times, py::arg("compute_efficiency") = 0.0,
           "the simulator's (start_s, end_s) of every op, indexed by op id, on the cluster the "
           "schedule was built for");
  m.def(
      "build_schedule",
      [](const py::object& model, const py::object& cluster, const py::object& parallel,
         const std::string& strategy, int layers, int64_t seq_len, int64_t micro_batch,
         const std::string& routing, double locality, bool lm_head) {
        return build(model, cluster, parallel, strategy, layers, seq_len, micro_batch,
                     RoutingArgs{routing, locality, lm_head});
      },
      py::arg("model"), py::arg("cluster"), py::arg("parallel"), py::arg("strategy"),
      py::arg("layers") = 1, py::arg("seq_len") = 0, py::arg("micro_batch") = 0,
      py::arg("routing") = "auto", py::arg("locality") = 0.9, py::arg("lm_head") = false,
      "build one training step's schedule; routing and locality as moecomm.simulate (the "
      "A2A sizes it is priced with), lm_head: the whole model's step (the LM head, and under "
      "placement=netmoe the targets' AllGather)");
  m.def(
      "format_rank_ranges",
      [](const std::vector<int>& ranks, const std::string& separator) {
        return core::format_rank_ranges(ranks, separator);
      },
      py::arg("ranks"), py::arg("separator") = ", ",
      "ascending ranks as runs: [0, 2, 3, 4] -> '0, 2-4' (the runtime's messages)");
}

}  // namespace moecomm::python
