#include "core/json_reader.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>

#include "support/expect_error.h"

namespace moecomm::core {
namespace {

TEST(JsonReader, NamesNestedKeys) {
  nlohmann::json j = {{"a", {{"b", -1}}}, {"n", nullptr}, {"x", 1.5}};
  JsonReader r(j, "f.json");
  JsonReader a = r.object("a");
  EXPECT_EQ(a.where("b"), "f.json: a.b");
  EXPECT_ERROR_HAS(a.positive("b"), "f.json: a.b", "must be positive");
  EXPECT_FALSE(r.nullable_positive("n").has_value());
  EXPECT_ERROR_HAS(r.integer("x"), "f.json: x", "must be an integer");
  EXPECT_DOUBLE_EQ(r.number("x"), 1.5);
  r.reject_unknown();  // every key read
}

TEST(JsonReader, FileErrors) {
  EXPECT_ERROR_HAS(read_json_file("/nonexistent/c.json"), "/nonexistent/c.json", "cannot open");
  std::string path = ::testing::TempDir() + "broken.json";
  std::ofstream(path) << "{\"name\": ";
  EXPECT_ERROR_HAS(read_json_file(path), path, "invalid JSON");
  std::ofstream(path) << "{\"latency_us\": 1e400}";  // out of double's range
  EXPECT_ERROR_HAS(read_json_file(path), path, "invalid JSON");
  std::remove(path.c_str());
}

}  // namespace
}  // namespace moecomm::core
