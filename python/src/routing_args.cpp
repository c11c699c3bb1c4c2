#include "routing_args.h"

#include "core/error.h"

namespace moecomm::python {

void check_routing(const std::string& routing, double locality) {
  if (routing != "auto" && routing != "uniform" && routing != "synthetic")
    throw Error("routing", "must be auto, uniform or synthetic, got \"" + routing + "\"");
  if (!(locality >= 0 && locality <= 1)) throw Error("locality", "must be in [0, 1]");
}

std::optional<cli::RoutedDispatch> route(const cli::ModelSetup& setup, const std::string& routing,
                                         double locality, sched::LayerSetup& layer) {
  const bool netmoe = layer.strategy.placement == sched::Placement::kNetMoe;
  if (netmoe && routing == "uniform")
    throw Error("routing",
                "placement=netmoe moves samples by their routing: use routing=\"synthetic\" (the "
                "default for netmoe), not uniform");
  if (routing != "synthetic" && !(routing == "auto" && netmoe)) return std::nullopt;
  place::SyntheticRoutingSpec spec;
  spec.locality = locality;
  spec.layer_correlation = 0.9;    // as `moecomm sim`
  cli::ModelSetup packed = setup;  // Lina's packing may have moved the EP size
  packed.parallel = layer.parallel;
  cli::RoutedDispatch routed = cli::routed_dispatch(packed, spec, netmoe, "flow");
  layer.a2a_pair_bytes = routed.matrices;
  return routed;
}

}  // namespace moecomm::python
