// Cluster files (--cluster FILE): parse_cluster, and what it accepts must write back
// (cluster_to_json, as `profile` writes) and read back the same.
#include <cstddef>
#include <cstdint>

#include "core/cluster.h"
#include "core/json_reader.h"
#include "fuzz_check.h"

using namespace moecomm;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto parsed = fuzz::accepted([&] {
    return core::parse_cluster(core::parse_json_text(fuzz::text_of(data, size), "c.json"),
                               "c.json");
  });
  if (!parsed) return 0;
  const core::Cluster& cluster = *parsed;
  const std::string written = core::cluster_to_json(cluster).dump();
  const core::Cluster back = fuzz::must("written cluster reads back", [&] {
    return core::parse_cluster(core::parse_json_text(written, "written"), "written");
  });
  if (back.world_size() != cluster.world_size() || back.levels.size() != cluster.levels.size() ||
      back.efficiency != cluster.efficiency || core::cluster_to_json(back).dump() != written)
    fuzz::fail("cluster changed through cluster_to_json: " + written);
  return 0;
}
