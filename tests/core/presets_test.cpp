#include "core/presets.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>

#include "core/topology.h"
#include "support/expect_error.h"

namespace moecomm::core {
namespace {

TEST(Presets, EveryShippedPresetLoads) {
  auto clusters = list_presets("clusters");
  auto models = list_presets("models");
  EXPECT_GE(clusters.size(), 8u);
  EXPECT_GE(models.size(), 12u);
  for (const auto& name : clusters) {
    Cluster c = load_cluster(name);
    EXPECT_EQ(c.name, name);
    EXPECT_GT(Topology(c).world_size(), 1);
  }
  for (const auto& name : models) {
    ModelConfig m = load_model(name);
    EXPECT_EQ(m.name, name);
    if (m.cluster) {
      Cluster c = load_cluster(*m.cluster);  // the paper's testbed exists
      if (m.parallel) {
        EXPECT_NO_THROW(resolve_parallel(*m.parallel, c.world_size(), m.experts, name));
      }
    }
  }
}

TEST(Presets, DefaultsExist) {
  EXPECT_NO_THROW(load_cluster(kDefaultCluster));
  EXPECT_NO_THROW(load_model(kDefaultModel));
}

TEST(Presets, UserFileWorksWhereANameDoes) {
  std::string path = ::testing::TempDir() + "my-cluster.json";
  std::ofstream(path) << R"({"name": "mine", "levels": [{"name": "node", "count": 2,
      "bandwidth_GBps": 12.5, "latency_us": 5}], "device": {"tflops": 100, "memory_GB": 16,
      "memory_bandwidth_GBps": 900}})";
  EXPECT_EQ(load_cluster(path).name, "mine");
  std::remove(path.c_str());
}

TEST(Presets, Errors) {
  EXPECT_ERROR_HAS(load_cluster("no-such-cluster"), "cluster \"no-such-cluster\"",
                   "no such preset or file", kDefaultCluster);
  EXPECT_ERROR_HAS(load_model("/tmp/does/not/exist.json"), "/tmp/does/not/exist.json",
                   "no such model file");
  EXPECT_ERROR_HAS(load_model(""), "model", "empty name");
}

}  // namespace
}  // namespace moecomm::core
