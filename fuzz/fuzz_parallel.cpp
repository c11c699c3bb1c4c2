// Parallel sizes (--parallel dp=..,tp=..): parse_parallel_spec, then resolve_parallel against
// a world and expert count taken from the first bytes, as the CLI resolves them.
#include <cstddef>
#include <cstdint>

#include "core/parallel_config.h"
#include "fuzz_check.h"

using namespace moecomm;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 4) return 0;
  const int world = 1 + (data[0] | (data[1] << 8)) % 65536;
  const int experts = 1 + (data[2] | (data[3] << 8)) % 65536;
  const auto c = fuzz::accepted([&] {
    const core::ParallelSpec spec =
        core::parse_parallel_spec(fuzz::text_of(data + 4, size - 4), "--parallel");
    return core::resolve_parallel(spec, world, experts, "--parallel");
  });
  if (!c) return 0;
  if (c->world() != world || int64_t{c->esp} * c->ep * c->edp * c->pp != world ||
      experts % c->ep != 0)
    fuzz::fail("resolved sizes do not fold world " + std::to_string(world) + ": " +
               c->to_json().dump());
  return 0;
}
