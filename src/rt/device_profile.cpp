#include "rt/device_profile.h"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <numeric>
#include <string>
#include <vector>

#include "core/error.h"
#include "nn/gemm.h"
#include "nn/local_exchange.h"
#include "nn/synthetic_text.h"
#include "rt/background_traffic.h"
#include "rt/comm_pool.h"
#include "rt/wait.h"

namespace moecomm::rt {

namespace {

double reduce(const Comm& world, double v, MPI_Op op, const CallOptions& options) {
  double out = 0;
  MPI_Request req = MPI_REQUEST_NULL;
  check_mpi(MPI_Iallreduce(&v, &out, 1, MPI_DOUBLE, op, world.handle(), &req), "MPI_Iallreduce");
  wait_all({&req, 1}, world, "device profile reduction", options);
  return out;
}

// `work` per call of `step`, per second: one call to warm up (thread pools, page faults), a
// barrier, then calls for `seconds`.
template <class F>
double rate_all_at_once(const Comm& world, double seconds, const CallOptions& options, double work,
                        F step) {
  step();
  reduce(world, 0, MPI_SUM, options);  // a barrier
  const double start = MPI_Wtime();
  int count = 0;
  double elapsed = 0;
  do {
    step();
    elapsed = MPI_Wtime() - start;
    ++count;
  } while (elapsed < seconds);
  return work * count / elapsed;
}

struct StepTimes {
  int steps = 0;
  // Summed over the steps: this rank's own phase times, and the slowest rank's of each step.
  double forward_s = 0, backward_s = 0;
  double slowest_forward_s = 0, slowest_backward_s = 0;
  double per_step() const { return (slowest_forward_s + slowest_backward_s) / steps; }
  void add(const StepTimes& o) {
    steps += o.steps;
    forward_s += o.forward_s;
    backward_s += o.backward_s;
    slowest_forward_s += o.slowest_forward_s;
    slowest_backward_s += o.slowest_backward_s;
  }
};

// Elementwise maximum over the ranks, in place.
void max_over_ranks(const Comm& world, std::vector<double>& v, const CallOptions& options) {
  MPI_Request req = MPI_REQUEST_NULL;
  check_mpi(MPI_Iallreduce(MPI_IN_PLACE, v.data(), static_cast<int>(v.size()), MPI_DOUBLE, MPI_MAX,
                           world.handle(), &req),
            "MPI_Iallreduce");
  wait_all({&req, 1}, world, "device profile reduction", options);
}

// Forward and backward of the model on this rank's experts (no communication), in lockstep:
// every rank starts each phase together after a barrier, and a phase takes its slowest
// rank's time. Ranks share the cores, so a rank that finishes early hands its share to the
// others: its own time overstates the rate at which all of them get the work done.
class ModelStepTimer {
 public:
  explicit ModelStepTimer(const ModelStepProbe& probe)
      : probe_(probe),
        model_(probe.model, local_),
        text_(nn::SyntheticTextConfig{.vocab = probe.model.vocab}) {}

  // Steps for `seconds` and at least `min_steps` (decided together: all ranks stop at once).
  StepTimes time(const Comm& world, double seconds, int min_steps, const CallOptions& options) {
    if (!warm_) step(world, options);  // thread pools, page faults
    warm_ = true;
    std::vector<double> forward, backward;
    const double start = MPI_Wtime();
    while (true) {
      const bool done =
          static_cast<int>(forward.size()) >= min_steps && MPI_Wtime() - start >= seconds;
      if (reduce(world, done ? 1 : 0, MPI_MAX, options) > 0) break;
      const auto [f, b] = step(world, options);
      forward.push_back(f);
      backward.push_back(b);
    }
    StepTimes t;
    t.steps = static_cast<int>(forward.size());
    t.forward_s = std::accumulate(forward.begin(), forward.end(), 0.0);
    t.backward_s = std::accumulate(backward.begin(), backward.end(), 0.0);
    max_over_ranks(world, forward, options);
    max_over_ranks(world, backward, options);
    t.slowest_forward_s = std::accumulate(forward.begin(), forward.end(), 0.0);
    t.slowest_backward_s = std::accumulate(backward.begin(), backward.end(), 0.0);
    return t;
  }

 private:
  // This rank's forward and backward seconds; a barrier before each.
  std::pair<double, double> step(const Comm& world, const CallOptions& options) {
    const nn::TextBatch batch = text_.sample(probe_.batch, probe_.seq_len, step_++);
    model_.zero_grad();
    const double start = MPI_Wtime();
    model_.forward(batch.tokens, batch.targets, probe_.seq_len);
    const double forward = MPI_Wtime() - start;
    reduce(world, 0, MPI_SUM, options);
    const double mid = MPI_Wtime();
    model_.backward();
    return {forward, MPI_Wtime() - mid};
  }

  const ModelStepProbe& probe_;
  nn::LocalExchange local_;
  nn::MoeTransformer model_;
  const nn::SyntheticText text_;
  uint64_t step_ = 0;
  bool warm_ = false;
};

struct ModelStepTimes {
  StepTimes alone, beside;  // beside: background traffic running
  int64_t traffic_calls = 0;
};

// With traffic, alone and beside alternate in kRounds rounds, so that a drift of the
// machine's speed over the probe (other jobs, the host) falls on both alike.
ModelStepTimes time_model_steps(const Comm& world, const Comm& traffic_comm,
                                const ModelStepProbe& probe, const CallOptions& options) {
  constexpr int kRounds = 3;
  const bool traffic = probe.traffic_bytes > 0 && world.size() > 1;
  const int rounds = traffic ? kRounds : 1;
  const double seconds = probe.seconds / rounds;
  const int min_steps = (probe.min_steps + rounds - 1) / rounds;
  ModelStepTimer timer(probe);
  ModelStepTimes times;
  CallOptions traffic_options = options;
  traffic_options.label = "profile.background_traffic";
  for (int round = 0; round < rounds; ++round) {
    times.alone.add(timer.time(world, seconds, min_steps, options));
    if (!traffic) break;
    BackgroundTraffic background(traffic_comm, probe.traffic_bytes, traffic_options);
    times.beside.add(timer.time(world, seconds, min_steps, options));
    times.traffic_calls += background.stop();
  }
  return times;
}

double mem_total_bytes() {
  std::ifstream in("/proc/meminfo");
  std::string key, unit;
  double kb = 0;
  while (in >> key >> kb >> unit)
    if (key == "MemTotal:") return kb * 1024;
  throw Error("/proc/meminfo", "no MemTotal: cannot tell the memory per rank");
}

}  // namespace

DeviceProfile profile_device(const DeviceProbe& probe) {
  int size = 0;
  check_mpi(MPI_Comm_size(MPI_COMM_WORLD, &size), "MPI_Comm_size");
  core::RankGroup all(size);
  std::iota(all.begin(), all.end(), 0);
  const CommPool pool(MPI_COMM_WORLD,
                      {{all, 0, "device profile"}, {all, 1, "device profile traffic"}});
  const Comm& world = pool.at({all, 0});
  CallOptions options;
  options.label = "profile.device";
  // A rank waits at the next barrier for the slowest one's measurement.
  options.timeout_s = probe.timeout_s + 2 * probe.seconds;
  if (probe.model_step) options.timeout_s += 4 * probe.model_step->seconds;
  DeviceProfile d;
  const int64_t k = probe.gemm_size;
  const nn::Tensor a = nn::Tensor::randn({k, k}, 1), b = nn::Tensor::randn({k, k}, 2);
  nn::Tensor c({k, k});
  const double flops = rate_all_at_once(world, probe.seconds, options, 2.0 * k * k * k, [&] {
    nn::gemm(nn::Trans::kNo, nn::Trans::kNo, 1.0f, a, b, 0.0f, c);
  });
  d.gemm_flops = reduce(world, flops, MPI_SUM, options) / size;
  d.gemm_flops_min = reduce(world, flops, MPI_MIN, options);
  std::vector<char> src(static_cast<size_t>(probe.copy_bytes), 1), dst(src.size(), 0);
  const double copied =
      rate_all_at_once(world, probe.seconds, options, static_cast<double>(src.size()),
                       [&] { std::memcpy(dst.data(), src.data(), src.size()); });
  volatile char sink = dst[dst.size() / 2];  // the copies are used
  (void)sink;
  d.memory_bandwidth = reduce(world, copied, MPI_SUM, options) / size;
  d.memory_bytes = mem_total_bytes() / std::max(probe.ranks_per_node, 1);
  if (probe.model_step) {
    const ModelStepProbe& m = *probe.model_step;
    const ModelStepTimes t = time_model_steps(world, pool.at({all, 1}), m, options);
    // The slowest rank's phases are the device's rates; each rank's own, the slowest rank's.
    d.model_forward_flops = m.forward_flops * t.alone.steps / t.alone.slowest_forward_s;
    d.model_backward_flops = m.backward_flops * t.alone.steps / t.alone.slowest_backward_s;
    const double forward = m.forward_flops * t.alone.steps / t.alone.forward_s;
    const double backward = m.backward_flops * t.alone.steps / t.alone.backward_s;
    d.model_forward_flops_min = reduce(world, forward, MPI_MIN, options);
    d.model_backward_flops_min = reduce(world, backward, MPI_MIN, options);
    if (t.traffic_calls > 0) {
      d.overlapped_step_ratio = t.alone.per_step() / t.beside.per_step();  // same on every rank
      d.traffic_calls = t.traffic_calls;
    }
  }
  return d;
}

}  // namespace moecomm::rt
