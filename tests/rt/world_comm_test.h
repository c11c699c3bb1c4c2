#pragma once
// The fixture of the runtime's tests that run over every rank: the world communicator and
// call options with the test timeout and 2 ranks per logical node.
#include <gtest/gtest.h>

#include <string>

#include "mpi_test_util.h"
#include "rt/comm_pool.h"
#include "rt/wait.h"

namespace moecomm::rt::test {

class WorldCommTest : public ::testing::Test {
 public:
  static constexpr int kRanksPerNode = 2;

 protected:
  WorldCommTest() : pool_(MPI_COMM_WORLD, {{all_ranks(), 0}}) {}
  const Comm& world() const { return pool_.at({all_ranks(), 0}); }
  CallOptions options(const std::string& label = "collective") const {
    return {.label = label, .timeout_s = kTimeout, .ranks_per_node = kRanksPerNode};
  }

  CommPool pool_;
};

}  // namespace moecomm::rt::test
