// Strategy strings (--strategy NAME | knob=value,...): parse_strategy_knobs, and to_string's
// text (the `--strategy` that plan prints) parses back to the same strategy.
#include <cstddef>
#include <cstdint>

#include "fuzz_check.h"
#include "sched/strategy.h"

using namespace moecomm;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto parsed = fuzz::accepted([&] {
    return sched::parse_strategy_knobs(fuzz::text_of(data, size), "--strategy").strategy;
  });
  if (!parsed) return 0;
  const sched::Strategy& strategy = *parsed;
  const std::string text = sched::to_string(strategy);
  const sched::Strategy back =
      fuzz::must("printed strategy parses back", [&] { return sched::parse_strategy(text, "s"); });
  if (!(back == strategy)) fuzz::fail("strategy changed through to_string: " + text);
  return 0;
}
