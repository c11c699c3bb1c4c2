// Counts files (place --counts FILE): parse_counts, and what it accepts is consistent.
#include <cstddef>
#include <cstdint>

#include "core/json_reader.h"
#include "fuzz_check.h"
#include "place/counts_file.h"

using namespace moecomm;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto parsed = fuzz::accepted([&] {
    return place::parse_counts(core::parse_json_text(fuzz::text_of(data, size), "n.json"),
                               "n.json");
  });
  if (!parsed) return 0;
  const place::CountsInstance& in = *parsed;
  const int devices = in.grid.devices();
  if (static_cast<int>(in.expert_device.size()) != in.num.experts ||
      static_cast<int>(in.sample_device.size()) != in.num.samples || in.num.samples < devices)
    fuzz::fail("accepted counts of inconsistent shape");
  for (int d : in.expert_device)
    if (d < 0 || d >= devices) fuzz::fail("expert device out of range");
  for (int d : in.sample_device)
    if (d < 0 || d >= devices) fuzz::fail("sample device out of range");
  return 0;
}
