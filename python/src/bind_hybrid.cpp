// HybridEP's token routing (sched/hybrid_routing.h) for moecomm.torch: the rule the schedule's
// A2A pairs and the MPI runtime route rows by, so that the torch layer cannot drift from them.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <vector>

#include "bindings.h"
#include "sched/hybrid_routing.h"

namespace py = pybind11;

namespace moecomm::python {

void bind_hybrid(py::module_& m) {
  m.def(
      "hybrid_destinations",
      [](int members, int domain, std::vector<int> order, int member) {
        return sched::HybridRouting(members, domain, std::move(order), "hybrid_domain")
            .destinations(member);
      },
      py::arg("members"), py::arg("domain"), py::arg("order"), py::arg("member"),
      "per expert domain d, the EP member that `member`'s token rows for d's experts go to "
      "(HybridEP Algorithm 1: itself for its own domain, else d's member at its offset); order "
      "maps position -> member (empty: the identity)");
}

}  // namespace moecomm::python
