#pragma once
// The cluster file of DESIGN.md: levels outermost first (HybridEP's multilevel
// description), a device, and optional measured efficiency curves per level and collective.
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/dtype.h"
#include "core/json_reader.h"

namespace moecomm::core {

// The stated ranges of a cluster file's rates and sizes, in the file's units (README "Ranges
// of user input"). Wider than any machine built or planned, narrower than what breaks the
// arithmetic: a 1e-300 GB/s link would give 300-digit step times.
inline constexpr int kMaxLevelCount = 1'000'000;  // also the most devices in all
inline constexpr Range kBandwidthGBps = {1e-6, 1e6, "1 kB/s to 1 PB/s"};
inline constexpr Range kLatencyUs = {0, 1e7, "0 to 10 s"};
inline constexpr Range kOverheadUs = {0, 1e6, "0 to 1 s"};
inline constexpr Range kTflops = {1e-6, 1e6, "1 Mflop/s to 1 Eflop/s"};
inline constexpr Range kMemoryGB = {1e-3, 1e6, "1 MB to 1 PB"};
// compute_efficiency, overlapped_compute_share and the efficiency curves' points.
inline constexpr Range kShare = {1e-3, 1, "0.1% to 100%"};
inline constexpr Range kMessageBytes = {1, 1e15, "1 B to 1 PB"};

struct Level {
  std::string name;
  int count = 1;           // workers of this level inside one worker of the level above
  double bandwidth = 0.0;  // bytes/s one worker has to its peers at this level
  double latency = 0.0;    // seconds: wire latency, paid once per message in flight
  // LogGP's o (Culler et al.; Alexandrov et al.): seconds of CPU/NIC time a message costs its
  // sender and, again, its receiver, one message after another; optional, default 0.
  double overhead = 0.0;
};

struct Device {
  double flops = 0.0;  // peak flop/s of a compute dtype that flops_by_dtype does not list
  double memory_bytes = 0.0;
  double memory_bandwidth = 0.0;  // bytes/s
  // flop/s of backward-phase compute when measured apart (0: `flops`). Per counted flop a CPU
  // rank's forward (softmax, norms, the loss: work the simulator gives no flops) and its
  // backward (two GEMMs per forward GEMM) run at different rates.
  double backward_flops = 0.0;
  // The share of its compute rate a device keeps while one of its communication ops is in
  // flight (1: none lost). CPU ranks lose cores to the progress threads' polling, copies and
  // reductions; on GPUs a collective's kernels take SMs from the GEMMs.
  double overlapped_compute_share = 1.0;
  // Peak flop/s per compute dtype from the vendor's sheet (an A100: 19.5e12 fp32 on its CUDA
  // cores, 156e12 tf32 and 312e12 bf16/fp16 on its tensor cores); empty: `flops` for all.
  std::map<Dtype, double> flops_by_dtype = {};
  // The share of the peak that the model's compute reaches (GEMM efficiency, and the kernels
  // the flop count leaves out); 1 for rates that were measured, as `profile` writes them.
  double compute_efficiency = 1.0;

  double peak_flops(Dtype dtype) const;
  // Backward-phase peak: the measured backward_flops, else the dtype's peak.
  double backward_peak(Dtype dtype) const {
    return backward_flops > 0 ? backward_flops : peak_flops(dtype);
  }
};

// How concurrent collectives share a link: kPerCollective gives every collective on a link an
// equal share, split evenly among its flows (each collective one NCCL communicator, Lina Fig.
// 7a); kPerFlow is plain max-min over flows, as TCP connections with equal windows share one
// FIFO queue, where a collective's share grows with its flow count.
enum class Fairness { kPerCollective, kPerFlow };
std::string_view to_string(Fairness fairness);
// "per-collective" or "per-flow"; throws Error naming `where` otherwise.
Fairness parse_fairness(const std::string& name, const std::string& where);

// (message bytes, efficiency in (0, 1]) points of MoNTA's r(volume).
using CurvePoints = std::vector<std::pair<double, double>>;

struct Cluster {
  std::string name;
  std::string description;
  std::vector<Level> levels;
  Device device;
  // Whether the network serves transfers by priority (traffic classes: MoNTA's communication
  // priority, Lina's A2A-first links): true for the papers' clusters. false: every flow is of
  // one class, as MPI over TCP or shared memory moves them (`moecomm profile` writes false);
  // the runtime's own policies (Lina's gate, sched/policy.h) still hold.
  bool network_priorities = true;
  // How the network shares a link between collectives (`moecomm profile` writes per-flow).
  Fairness fairness = Fairness::kPerCollective;
  // level name -> collective name -> measured points.
  std::map<std::string, std::map<std::string, CurvePoints>> efficiency;

  int world_size() const;
  int level_index(const std::string& level_name) const;  // -1 when absent
  // Efficiency points of `collective` at `level`, empty when not measured.
  CurvePoints curve(const std::string& level, const std::string& collective) const;
};

// The collectives an efficiency curve may be given for.
const std::vector<std::string>& known_collectives();

// where: the file name, used in every error.
Cluster parse_cluster(const nlohmann::json& doc, const std::string& where);
nlohmann::json cluster_to_json(const Cluster& cluster);

}  // namespace moecomm::core
