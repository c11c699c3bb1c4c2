#pragma once
// NetMoE Algorithm 1 for a training loop: after layer l's gate, submit() hands the counts to
// a background thread (line 9), which solves while the scatter A2A and the experts run
// (lines 10-12); collect() takes the placement just before the gather (lines 13-14).
// One worker thread lives as long as the placer, so a layer pays no thread start.
#include <condition_variable>
#include <exception>
#include <mutex>
#include <optional>
#include <string_view>
#include <thread>
#include <vector>

#include "place/sample_placer.h"

namespace moecomm::place {

struct CollectedPlacement {
  SamplePlacement placement;  // placement.solve_us: the solver's own time
  double wait_us = 0;         // how long collect() blocked: the part not hidden
};

class AsyncSamplePlacer {
 public:
  explicit AsyncSamplePlacer(std::string_view solver = "flow");
  ~AsyncSamplePlacer();
  AsyncSamplePlacer(const AsyncSamplePlacer&) = delete;
  AsyncSamplePlacer& operator=(const AsyncSamplePlacer&) = delete;

  // Starts solving for gather(l) + scatter(l+1) counts. Throws Error if the previous
  // submission has not been collected.
  void submit(RoutingCounts num, std::vector<int> expert_device, DeviceGrid grid);
  // Blocks until the submitted solve ends; rethrows its error. Throws Error if nothing
  // was submitted.
  CollectedPlacement collect();

 private:
  struct Job {
    RoutingCounts num;
    std::vector<int> expert_device;
    DeviceGrid grid;
  };
  void work();

  SamplePlacer placer_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::optional<Job> job_;
  std::optional<SamplePlacement> result_;
  std::exception_ptr error_;
  bool pending_ = false;
  bool stop_ = false;
  std::thread worker_;  // last: starts after the members it uses exist
};

}  // namespace moecomm::place
