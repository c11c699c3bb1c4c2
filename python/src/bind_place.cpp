// moecomm.place: NetMoE's two-stage sample placement (Sec. 3.2) from Python, one-shot and as
// Algorithm 1's asynchronous solve (submit after the gate, collect before the gather).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "arrays.h"
#include "bindings.h"
#include "core/error.h"
#include "place/assignment.h"
#include "place/async_sample_placer.h"
#include "place/sample_placer.h"

namespace py = pybind11;

namespace moecomm::python {

namespace {

// Where the experts sit and the device grid: fixed for a layer, so a placer takes it once.
struct Layout {
  std::vector<int> expert_device;
  place::DeviceGrid grid;
};

// devices: None gives the smallest multiple of devices_per_node holding every expert's
// device, as `moecomm place --counts` reads it (place/counts_file.h).
Layout make_layout(const py::handle& expert_device, int devices_per_node,
                   std::optional<int> devices) {
  Layout l;
  l.expert_device = int_vector(expert_device, "expert_device");
  if (l.expert_device.empty()) throw Error("expert_device", "needs at least one expert");
  if (devices_per_node < 1)
    throw Error("devices_per_node", "must be >= 1, got " + std::to_string(devices_per_node));
  int highest = 0;
  for (size_t e = 0; e < l.expert_device.size(); ++e) {
    if (l.expert_device[e] < 0)
      throw Error("expert_device[" + std::to_string(e) + "]",
                  "device " + std::to_string(l.expert_device[e]) + " is negative");
    highest = std::max(highest, l.expert_device[e]);
  }
  const int total = devices.value_or((highest / devices_per_node + 1) * devices_per_node);
  if (total < 1 || total % devices_per_node != 0)
    throw Error("devices", std::to_string(total) + " is not a positive multiple of " +
                               "devices_per_node " + std::to_string(devices_per_node));
  l.grid.devices_per_node = devices_per_node;
  l.grid.nodes = total / devices_per_node;
  for (size_t e = 0; e < l.expert_device.size(); ++e)
    if (l.expert_device[e] >= total)
      throw Error("expert_device[" + std::to_string(e) + "]",
                  "device " + std::to_string(l.expert_device[e]) + " is outside [0, " +
                      std::to_string(total) + ")");
  return l;
}

// num: samples x experts token counts of gather(l) + scatter(l+1) (NetMoE Eq. 10).
place::RoutingCounts counts_of(const py::handle& num, const Layout& layout) {
  const auto a = int_array(num, 2, "num");
  const auto samples = a.shape(0), experts = a.shape(1);
  if (experts != static_cast<py::ssize_t>(layout.expert_device.size()))
    throw Error("num", "has " + std::to_string(experts) + " columns, expected one per expert (" +
                           std::to_string(layout.expert_device.size()) +
                           ", expert_device's length)");
  if (samples < layout.grid.devices())
    throw Error("num", std::to_string(samples) + " samples cannot fill " +
                           std::to_string(layout.grid.devices()) + " devices");
  if (samples > (1 << 24)) throw Error("num", "more than 2^24 samples");
  place::RoutingCounts c(static_cast<int>(samples), static_cast<int>(experts));
  const int64_t* p = a.data();
  for (size_t x = 0; x < c.num.size(); ++x) {
    if (p[x] < 0)
      throw Error("num[" + std::to_string(x / experts) + "][" + std::to_string(x % experts) + "]",
                  "token count " + std::to_string(p[x]) + " is negative");
    c.num[x] = p[x];
  }
  return c;
}

struct Placement {
  py::array_t<int64_t> sample_device;
  int64_t inter_node_tokens = 0, intra_node_tokens = 0;
  double solve_us = 0, wait_us = 0;
};

Placement to_python(const place::SamplePlacement& p, double wait_us) {
  std::vector<int64_t> d(p.sample_device.begin(), p.sample_device.end());
  return {to_numpy(d), p.inter_node_tokens, p.intra_node_tokens, p.solve_us, wait_us};
}

class PySamplePlacer {
 public:
  PySamplePlacer(const py::handle& expert_device, int devices_per_node, std::optional<int> devices,
                 const std::string& solver)
      : layout_(make_layout(expert_device, devices_per_node, devices)), placer_(solver) {}
  Placement place(const py::handle& num) {
    const place::RoutingCounts counts = counts_of(num, layout_);
    place::SamplePlacement p;
    {
      py::gil_scoped_release release;
      p = placer_.place(counts, layout_.expert_device, layout_.grid);
    }
    return to_python(p, 0);
  }
  const Layout& layout() const { return layout_; }
  std::string solver() const { return std::string(placer_.solver_name()); }

 private:
  Layout layout_;
  place::SamplePlacer placer_;
};

class PyAsyncSamplePlacer {
 public:
  PyAsyncSamplePlacer(const py::handle& expert_device, int devices_per_node,
                      std::optional<int> devices, const std::string& solver)
      : layout_(make_layout(expert_device, devices_per_node, devices)),
        solver_(place::make_assignment_solver(solver)->name()),
        placer_(std::make_unique<place::AsyncSamplePlacer>(solver)) {}
  void submit(const py::handle& num) {
    place::RoutingCounts counts = counts_of(num, layout_);
    placer_->submit(std::move(counts), layout_.expert_device, layout_.grid);
  }
  Placement collect() {
    place::CollectedPlacement c;
    {
      py::gil_scoped_release release;  // the solve runs on the placer's thread meanwhile
      c = placer_->collect();
    }
    return to_python(c.placement, c.wait_us);
  }
  const Layout& layout() const { return layout_; }
  const std::string& solver() const { return solver_; }

 private:
  Layout layout_;
  std::string solver_;
  std::unique_ptr<place::AsyncSamplePlacer> placer_;
};

// SamplePlacer::place's steps timed one by one (steady_clock, microseconds), medians over
// `reps` runs: where a two-stage solve spends its time beyond stage 1's solver.
py::dict stage_times(const py::handle& num, const py::handle& expert_device, int devices_per_node,
                     std::optional<int> devices, const std::string& solver, int reps) {
  if (reps < 1) throw Error("reps", "must be >= 1");
  const Layout l = make_layout(expert_device, devices_per_node, devices);
  const place::RoutingCounts counts = counts_of(num, l);
  place::SamplePlacer(solver).check(counts, l.expert_device, l.grid);
  auto s = place::make_assignment_solver(solver);
  using Clock = std::chrono::steady_clock;
  auto us = [](Clock::time_point a, Clock::time_point b) {
    return std::chrono::duration<double, std::micro>(b - a).count();
  };
  std::vector<double> build1(reps), solve1(reps), build2(reps), solve2(reps), whole(reps);
  py::gil_scoped_release release;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = Clock::now();
    const place::AssignmentProblem p1 = place::node_stage_problem(counts, l.expert_device, l.grid);
    const auto t1 = Clock::now();
    const place::Assignment nodes = s->solve(p1);
    const auto t2 = Clock::now();
    std::vector<std::vector<int>> rows_of_node(l.grid.nodes);
    for (int i = 0; i < counts.samples; ++i) rows_of_node[nodes.bin_of[i]].push_back(i);
    double b2 = 0, s2 = 0;
    for (int n = 0; n < l.grid.nodes; ++n) {
      const auto a = Clock::now();
      const place::AssignmentProblem p2 =
          place::device_stage_problem(counts, l.expert_device, l.grid, n, rows_of_node[n]);
      const auto b = Clock::now();
      s->solve(p2);  // the result is not needed, only its time
      const auto c = Clock::now();
      b2 += us(a, b);
      s2 += us(b, c);
    }
    const auto t3 = Clock::now();
    build1[r] = us(t0, t1);
    solve1[r] = us(t1, t2);
    build2[r] = b2;
    solve2[r] = s2;
    whole[r] = us(t0, t3);
  }
  auto median = [](std::vector<double> v) {
    std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
    return v[v.size() / 2];
  };
  py::gil_scoped_acquire acquire;
  py::dict out;
  out["stage1_build_us"] = median(build1);
  out["stage1_solve_us"] = median(solve1);
  out["stage2_build_us"] = median(build2);
  out["stage2_solve_us"] = median(solve2);
  out["total_us"] = median(whole);
  return out;
}

}  // namespace

void bind_place(py::module_& m) {
  py::class_<Placement>(m, "Placement", "Where NetMoE's two stages put each sample.")
      .def_readonly("sample_device", &Placement::sample_device,
                    "int64 array: the device of each sample after placement")
      .def_readonly("inter_node_tokens", &Placement::inter_node_tokens,
                    "stage 1 optimum: tokens that cross nodes (NetMoE Eq. 10)")
      .def_readonly("intra_node_tokens", &Placement::intra_node_tokens,
                    "stage 2 optima summed over nodes: tokens that leave their device inside "
                    "a node (Eq. 7)")
      .def_readonly("solve_us", &Placement::solve_us,
                    "both stages in C++, wall clock, microseconds (problem building included)")
      .def_readonly("wait_us", &Placement::wait_us,
                    "asynchronous placer: how long collect() blocked (0 for a one-shot solve)")
      .def("__repr__", [](const Placement& p) {
        return "Placement(inter_node_tokens=" + std::to_string(p.inter_node_tokens) +
               ", intra_node_tokens=" + std::to_string(p.intra_node_tokens) +
               ", solve_us=" + std::to_string(p.solve_us) + ")";
      });

  auto layout_props = [](auto& cls) {
    using T = typename std::remove_reference_t<decltype(cls)>::type;
    cls.def_property_readonly(
           "expert_device", [](const T& p) { return to_numpy(p.layout().expert_device); },
           "the device of each expert")
        .def_property_readonly(
            "devices_per_node", [](const T& p) { return p.layout().grid.devices_per_node; },
            "devices per node (J/N)")
        .def_property_readonly(
            "nodes", [](const T& p) { return p.layout().grid.nodes; }, "nodes (N)")
        .def_property_readonly("solver", &T::solver, "the assignment solver's name");
  };

  py::class_<PySamplePlacer> sync(m, "SamplePlacer");
  sync.def(py::init<const py::handle&, int, std::optional<int>, const std::string&>(),
           py::arg("expert_device"), py::arg("devices_per_node"), py::arg("devices") = py::none(),
           py::arg("solver") = "flow")
      .def("place", &PySamplePlacer::place, py::arg("num"));
  layout_props(sync);

  py::class_<PyAsyncSamplePlacer> async(m, "AsyncSamplePlacer");
  async
      .def(py::init<const py::handle&, int, std::optional<int>, const std::string&>(),
           py::arg("expert_device"), py::arg("devices_per_node"), py::arg("devices") = py::none(),
           py::arg("solver") = "flow")
      .def("submit", &PyAsyncSamplePlacer::submit, py::arg("num"))
      .def("collect", &PyAsyncSamplePlacer::collect);
  layout_props(async);

  m.def("assignment_solvers", &place::assignment_solver_names);

  // The stages' pieces, for timing them apart (bench/bench_place.py).
  m.def(
      "node_stage_problem",
      [](const py::handle& num, const py::handle& expert_device, int devices_per_node,
         std::optional<int> devices) {
        const Layout l = make_layout(expert_device, devices_per_node, devices);
        const place::RoutingCounts counts = counts_of(num, l);
        // Sums of a sample's counts must fit, as for a solve.
        place::SamplePlacer().check(counts, l.expert_device, l.grid);
        const place::AssignmentProblem p =
            place::node_stage_problem(counts, l.expert_device, l.grid);
        py::array_t<int64_t> cost({p.rows, p.bins});
        std::copy(p.cost.begin(), p.cost.end(), cost.mutable_data());
        return py::make_tuple(cost, to_numpy(p.capacity));
      },
      py::arg("num"), py::arg("expert_device"), py::arg("devices_per_node"),
      py::arg("devices") = py::none());
  m.def("_stage_times", &stage_times, py::arg("num"), py::arg("expert_device"),
        py::arg("devices_per_node"), py::arg("devices"), py::arg("solver"), py::arg("reps"));
  m.def(
      "assign",
      [](const py::handle& cost, const py::handle& capacity, const std::string& solver) {
        const auto c = int_array(cost, 2, "cost");
        place::AssignmentProblem p;
        if (c.shape(0) > (1 << 24) || c.shape(1) > (1 << 20))
          throw Error("cost", "too large (at most 2^24 rows and 2^20 bins)");
        p.rows = static_cast<int>(c.shape(0));
        p.bins = static_cast<int>(c.shape(1));
        p.cost.assign(c.data(), c.data() + c.size());
        p.capacity = int_vector(capacity, "capacity");
        p.validate();
        auto s = place::make_assignment_solver(solver);
        place::Assignment a;
        double us = 0;
        {
          py::gil_scoped_release release;
          const auto start = std::chrono::steady_clock::now();
          a = s->solve(p);
          us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
                   .count();
        }
        std::vector<int64_t> bins(a.bin_of.begin(), a.bin_of.end());
        return py::make_tuple(to_numpy(bins), a.cost, us);
      },
      py::arg("cost"), py::arg("capacity"), py::arg("solver") = "flow");
}

}  // namespace moecomm::python
