// Routing traces (place --trace FILE, infer --trace FILE): parse_routing_trace, and
// routing_trace_to_json (what --write-trace writes) reads back the same.
#include <cstddef>
#include <cstdint>

#include "core/json_reader.h"
#include "fuzz_check.h"
#include "place/routing_trace.h"

using namespace moecomm;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto parsed = fuzz::accepted([&] {
    return place::parse_routing_trace(core::parse_json_text(fuzz::text_of(data, size), "t.json"),
                                      "t.json");
  });
  if (!parsed) return 0;
  const place::RoutingTrace& trace = *parsed;
  const nlohmann::json written =
      fuzz::must("accepted trace writes", [&] { return place::routing_trace_to_json(trace); });
  const place::RoutingTrace back = fuzz::must(
      "written trace reads back", [&] { return place::parse_routing_trace(written, "written"); });
  if (back.experts != trace.experts || back.top_k != trace.top_k ||
      back.iterations.size() != trace.iterations.size() ||
      place::routing_trace_to_json(back) != written)
    fuzz::fail("trace changed through routing_trace_to_json");
  return 0;
}
