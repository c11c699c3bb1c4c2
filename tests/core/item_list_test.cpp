#include "core/item_list.h"

#include <gtest/gtest.h>

#include "support/expect_error.h"

namespace moecomm::core {
namespace {

using moecomm::testing::error_of;

TEST(ItemList, SplitsOnCommas) {
  EXPECT_EQ(split_items("tp=2,ep=4", "-"), (std::vector<std::string>{"tp=2", "ep=4"}));
  EXPECT_EQ(split_items("lina", "-"), (std::vector<std::string>{"lina"}));
  EXPECT_TRUE(split_items("", "-").empty());
}

TEST(ItemList, AnEmptyItemIsRefusedWithItsPosition) {
  EXPECT_EQ(error_of([] { split_items("tp=2,,ep=4", "--parallel"); }),
            "--parallel: item 2 of \"tp=2,,ep=4\" is empty (separate items by single commas, "
            "none at either end)");
  EXPECT_EQ(error_of([] { split_items(",", "--parallel"); }),
            "--parallel: item 1 of \",\" is empty (separate items by single commas, none at "
            "either end)");
  EXPECT_EQ(error_of([] { split_items("chunks=2,", "--strategy"); }),
            "--strategy: item 2 of \"chunks=2,\" is empty (separate items by single commas, none "
            "at either end)");
}

}  // namespace
}  // namespace moecomm::core
