// moecomm._moecomm.a2a_routing: an A2A algorithm's routing plan (sched/a2a_routing.h), the
// one the simulator prices and the MPI runtime runs, for moecomm.torch to run the same steps.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <string>
#include <vector>

#include "bindings.h"
#include "core/error.h"
#include "sched/a2a_routing.h"
#include "sched/strategy.h"

namespace py = pybind11;

namespace moecomm::python {

namespace {

using Blocks = std::vector<sched::Block>;
using Messages = std::vector<std::pair<int, Blocks>>;  // (peer member, blocks in order)

// What one member does in each step: the messages it sends and those it receives, by their
// pair blocks and (dedup) node blocks.
struct MemberStep {
  Messages sends, recvs, node_sends, node_recvs;
};

std::vector<MemberStep> member_steps(const sched::A2ARouting& r, int member) {
  if (member < 0 || member >= r.members)
    throw Error("a2a_routing", "member " + std::to_string(member) + " is not in a group of " +
                                   std::to_string(r.members));
  std::vector<MemberStep> out;
  for (const sched::RoutingStep& step : r.steps) {
    MemberStep& mine = out.emplace_back();
    for (const sched::RoutedTransfer& t : step) {
      if (t.from == member && !t.blocks.empty()) mine.sends.emplace_back(t.to, t.blocks);
      if (t.to == member && !t.blocks.empty()) mine.recvs.emplace_back(t.from, t.blocks);
      if (t.from == member && !t.node_blocks.empty())
        mine.node_sends.emplace_back(t.to, t.node_blocks);
      if (t.to == member && !t.node_blocks.empty())
        mine.node_recvs.emplace_back(t.from, t.node_blocks);
    }
  }
  return out;
}

}  // namespace

void bind_routing(py::module_& m) {
  py::class_<MemberStep>(m, "RoutingMemberStep", "one member's messages in one routing step")
      .def_readonly("sends", &MemberStep::sends, "[(to member, [(src, dst) block, ...]), ...]")
      .def_readonly("recvs", &MemberStep::recvs,
                    "[(from member, [(src, dst) block, ...]), ...], in the order sent")
      .def_readonly("node_sends", &MemberStep::node_sends,
                    "dedup: [(to member, [(from, to) node block]), ...]; "
                    "A2ARouting.node_block_pairs tells what each stands for")
      .def_readonly("node_recvs", &MemberStep::node_recvs,
                    "dedup: [(from member, [(from, to) node block]), ...]");
  py::class_<sched::A2ARouting>(m, "A2ARouting",
                                "an A2A-v's routing plan: steps of transfers of (src, dst) blocks")
      .def_property_readonly(
          "algorithm",
          [](const sched::A2ARouting& r) { return std::string(to_string(r.algorithm)); },
          "the algorithm as run (flat where a hierarchy does not apply)")
      .def_readonly("members", &sched::A2ARouting::members)
      .def_property_readonly("direct", &sched::A2ARouting::direct,
                             "one step, every block straight to its destination (a plain A2A-v)")
      .def_property_readonly(
          "steps",
          [](const sched::A2ARouting& r) {
            std::vector<std::vector<std::tuple<int, int, Blocks>>> out;
            for (const sched::RoutingStep& step : r.steps) {
              auto& s = out.emplace_back();
              for (const sched::RoutedTransfer& t : step) s.emplace_back(t.from, t.to, t.blocks);
            }
            return out;
          },
          "per step: [(from member, to member, [(src, dst) block, ...]), ...]")
      .def("member_steps", &member_steps, py::arg("member"),
           "per step, what `member` sends and receives")
      .def_property_readonly("direction",
                             [](const sched::A2ARouting& r) {
                               return std::string(r.direction == sched::A2ADirection::kDispatch
                                                      ? "dispatch"
                                                      : "combine");
                             })
      .def(
          "node_block_pairs",
          [](const sched::A2ARouting& r, int from, int to) {
            return r.node_block_pairs({from, to});
          },
          py::arg("source"), py::arg("destination"),
          "dedup: the (src, dst) pair blocks the node block (source, destination) stands for "
          "(sched/a2a_routing.h): dispatch, each token once over them; combine, summed per token");
  m.def(
      "a2a_routing",
      [](const std::string& algorithm, const std::vector<int>& group, int ranks_per_node,
         const std::string& direction) {
        const sched::Algorithm a = sched::parse_a2a_algorithm(algorithm, "a2a_routing");
        if (direction != "dispatch" && direction != "combine")
          throw Error("a2a_routing",
                      "direction must be dispatch or combine, got '" + direction + "'");
        return sched::a2a_routing(a, group, ranks_per_node,
                                  direction == "dispatch" ? sched::A2ADirection::kDispatch
                                                          : sched::A2ADirection::kCombine);
      },
      py::arg("algorithm"), py::arg("group"), py::arg("ranks_per_node"),
      py::arg("direction") = "dispatch",
      "the routing plan of the A2A algorithm `algorithm` (an a2a knob value) over `group` "
      "(global ranks), where ranks r and s share a node when r // ranks_per_node == s // "
      "ranks_per_node; `direction` (dispatch or combine) matters to dedup only");
  m.def("a2a_algorithms", &sched::a2a_algorithm_names, "the a2a knob's values, in order");
  m.def("routed_a2a_algorithms", &sched::routed_a2a_algorithm_names,
        "the a2a knob's values whose plans move (source, destination) blocks only, which "
        "moecomm.torch and the MPI runtime run (all but dedup)");
  m.def("members_by_node", &sched::members_by_node, py::arg("group"), py::arg("ranks_per_node"),
        "member indices of `group` by node, nodes ascending; empty where nodes hold different "
        "numbers of members");
}

}  // namespace moecomm::python
