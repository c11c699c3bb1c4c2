// The model file's parallel sizes follow the cluster's shape, not its name: a copy of the
// model's testbed preset that keeps the "name" but changes the shape gets derived sizes, and
// errors blame the file and key at fault.
#include "core/model_setup.h"

#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "core/json_reader.h"
#include "core/presets.h"
#include "support/expect_error.h"

namespace moecomm::core {
namespace {

using nlohmann::json;

std::string write(const std::string& name, const json& doc) {
  const std::string path = ::testing::TempDir() + "/" + name;
  std::ofstream(path) << doc.dump();
  return path;
}

// fsmoe-mixtral-22b names fsmoe-testbed-a (6 nodes x 8 GPUs) and dp=6, tp=8, ep=6, esp=8.
json testbed() {
  return core::read_json_file(core::data_dir() + "/clusters/fsmoe-testbed-a.json");
}

TEST(ModelSetup, TheModelsParallelSizesApplyOnItsTestbed) {
  const ModelSetup s = resolve_model_setup("fsmoe-mixtral-22b", "", "");
  EXPECT_EQ(s.cluster.name, "fsmoe-testbed-a");
  EXPECT_EQ(s.parallel.dp, 6);
  EXPECT_EQ(s.parallel.tp, 8);
  EXPECT_EQ(s.parallel.ep, 6);
  EXPECT_EQ(s.parallel.esp, 8);
  // A copy under another name has the testbed's shape: the same sizes.
  json renamed = testbed();
  renamed["name"] = "my-testbed";
  const ModelSetup r =
      resolve_model_setup("fsmoe-mixtral-22b", write("setup_renamed.json", renamed), "");
  EXPECT_EQ(r.parallel.dp, 6);
  EXPECT_EQ(r.parallel.tp, 8);
}

TEST(ModelSetup, ACopyOfTheTestbedWithAnotherShapeGetsDerivedSizes) {
  json copy = testbed();  // keeps "name": "fsmoe-testbed-a"
  copy["levels"][0]["count"] = 2;
  const std::string path = write("setup_2_nodes.json", copy);
  const ModelSetup s = resolve_model_setup("fsmoe-mixtral-22b", path, "");
  EXPECT_EQ(s.cluster.name, "fsmoe-testbed-a");
  EXPECT_EQ(s.parallel.world(), 16);
  EXPECT_EQ(s.parallel.tp, 1);  // derived: tp = cp = pp = 1, dp fills the world
  EXPECT_EQ(s.parallel.dp, 16);
  // Sizes the user gives that do not fit the copy are the user's flag's fault.
  EXPECT_ERROR_HAS(resolve_model_setup("fsmoe-mixtral-22b", path, "dp=6,tp=8"), "--parallel");
  const std::string why =
      testing::error_of([&] { resolve_model_setup("fsmoe-mixtral-22b", path, "dp=6,tp=8"); });
  EXPECT_EQ(why.find("fsmoe-mixtral-22b"), std::string::npos) << why;
}

TEST(ModelSetup, AModelNamingNoClusterBlamesItsClusterKey) {
  json model = core::read_json_file(core::data_dir() + "/models/fsmoe-mixtral-22b.json");
  model["cluster"] = "no-such-testbed";
  const std::string path = write("setup_model.json", model);
  EXPECT_ERROR_HAS(resolve_model_setup(path, "", ""), path + ": cluster", "no-such-testbed");
  // Its parallel sizes are matched against the testbed's shape, which must exist.
  EXPECT_ERROR_HAS(resolve_model_setup(path, "netmoe-a800-4x8", ""), path + ": cluster",
                   "no-such-testbed");
}

}  // namespace
}  // namespace moecomm::core
