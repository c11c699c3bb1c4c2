// `moecomm profile`'s cluster file read back: measured rows (any sizes and times, noise
// included), fitted and written as profile writes them, must either be refused with an Error
// or read back through parse_cluster as `--cluster FILE` reads it.
#include <fuzzer/FuzzedDataProvider.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/cluster.h"
#include "cost/profile_fit.h"
#include "fuzz_check.h"

using namespace moecomm;

namespace {

// Mostly log-uniform over a wide span (what a sweep measures), sometimes any double at all
// (zero, negative, NaN, infinite: a broken measurement).
double measured(FuzzedDataProvider& in, double lo_exp, double hi_exp) {
  if (in.ConsumeIntegralInRange<int>(0, 15) == 0) return in.ConsumeFloatingPoint<double>();
  return std::pow(10.0, in.ConsumeFloatingPointInRange<double>(lo_exp, hi_exp));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  std::vector<cost::LevelSpec> levels;
  const int level_count = in.ConsumeIntegralInRange<int>(1, 3);
  for (int l = 0; l < level_count; ++l)
    levels.push_back({"level" + std::to_string(l), in.ConsumeIntegralInRange<int>(1, 9)});
  std::vector<cost::ProfileRow> rows;
  const int row_count = in.ConsumeIntegralInRange<int>(0, 40);
  for (int r = 0; r < row_count; ++r) {
    cost::ProfileRow row;
    const cost::LevelSpec& level = levels[in.ConsumeIntegralInRange<size_t>(0, levels.size() - 1)];
    row.level = level.name;
    row.op = static_cast<cost::Collective>(in.ConsumeIntegralInRange<int>(0, 3));
    row.ranks = in.ConsumeBool() ? level.count : in.ConsumeIntegralInRange<int>(0, 9);
    row.bytes = measured(in, 0, 12);
    row.seconds = measured(in, -9, 3);
    rows.push_back(row);
  }
  core::Device device;
  device.flops = measured(in, 6, 18);
  device.memory_bytes = measured(in, 6, 15);
  device.memory_bandwidth = measured(in, 3, 15);
  if (in.ConsumeBool()) {
    device.backward_flops = measured(in, 6, 18);
    device.overlapped_compute_share = in.ConsumeFloatingPointInRange<double>(1e-6, 1);
  }
  const auto cluster = fuzz::accepted(
      [&] { return cost::profiled_cluster(cost::fit_profile(rows, levels), device, "profiled"); });
  if (!cluster) return 0;
  const std::string written = core::cluster_to_json(*cluster).dump();
  fuzz::must("profile's cluster file reads back", [&] {
    return core::parse_cluster(core::parse_json_text(written, "written"), "written");
  });
  return 0;
}
