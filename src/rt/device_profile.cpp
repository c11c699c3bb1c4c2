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

struct Repeats {
  int count = 0;       // timed calls
  double seconds = 0;  // their time
};

// Calls `step(false)` once (a warm-up: thread pools, page faults), waits for every rank, then
// calls `step(true)` for `seconds` and at least `min_reps` times.
template <class F>
Repeats repeat_all_at_once(const Comm& world, double seconds, const CallOptions& options, F step,
                           int min_reps = 1) {
  step(false);
  reduce(world, 0, MPI_SUM, options);  // a barrier
  const double start = MPI_Wtime();
  Repeats r;
  do {
    step(true);
    r.seconds = MPI_Wtime() - start;
    ++r.count;
  } while (r.seconds < seconds || r.count < min_reps);
  return r;
}

// `work` per call of `step`, per second, repeated as above.
template <class F>
double rate_all_at_once(const Comm& world, double seconds, const CallOptions& options, double work,
                        F step) {
  const Repeats r = repeat_all_at_once(world, seconds, options, [&](bool) { step(); });
  return work * r.count / r.seconds;
}

struct PhaseRates {
  double forward = 0, backward = 0;  // flop/s
};

// Forward and backward of the model on this rank's experts (no communication), repeated,
// each phase timed on its own.
PhaseRates model_step_rates(const Comm& world, const ModelStepProbe& probe,
                            const CallOptions& options) {
  nn::LocalExchange local;
  nn::MoeTransformer model(probe.model, local);
  const nn::SyntheticText text(nn::SyntheticTextConfig{.vocab = probe.model.vocab});
  uint64_t step = 0;
  double forward_s = 0, backward_s = 0;
  const Repeats r = repeat_all_at_once(
      world, probe.seconds, options,
      [&](bool timed) {
        const nn::TextBatch batch = text.sample(probe.batch, probe.seq_len, step++);
        model.zero_grad();
        const double start = MPI_Wtime();
        model.forward(batch.tokens, batch.targets, probe.seq_len);
        const double mid = MPI_Wtime();
        model.backward();
        if (!timed) return;
        forward_s += mid - start;
        backward_s += MPI_Wtime() - mid;
      },
      probe.min_steps);
  return {probe.forward_flops * r.count / forward_s, probe.backward_flops * r.count / backward_s};
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
  const CommPool pool(MPI_COMM_WORLD, {{all, 0, "device profile"}});
  const Comm& world = pool.at({all, 0});
  CallOptions options;
  options.label = "profile.device";
  // A rank waits at the next barrier for the slowest one's measurement.
  options.timeout_s = probe.timeout_s + 2 * probe.seconds;
  if (probe.model_step) options.timeout_s += 2 * probe.model_step->seconds;
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
    const PhaseRates r = model_step_rates(world, *probe.model_step, options);
    d.model_forward_flops = reduce(world, r.forward, MPI_SUM, options) / size;
    d.model_backward_flops = reduce(world, r.backward, MPI_SUM, options) / size;
    d.model_forward_flops_min = reduce(world, r.forward, MPI_MIN, options);
    d.model_backward_flops_min = reduce(world, r.backward, MPI_MIN, options);
  }
  return d;
}

}  // namespace moecomm::rt
