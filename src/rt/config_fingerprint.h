#pragma once
// The settings every rank of a training job must hold alike (DESIGN.md: "Ranks that must agree
// compare a fingerprint before the first collective"). Ranks started with different flags or
// files would otherwise build different schedules: their collectives mismatch and the job ends
// in an MPI error (a truncated message) or trains on quietly, each rank its own model. One
// Allgather of a hash per setting finds the difference; the error names the setting and which
// ranks hold which value.
#include <cstdint>
#include <string>
#include <vector>

#include "rt/mpi_base.h"
#include "rt/train_loop.h"

namespace moecomm::rt {

// One setting: its name as errors give it, and its value as canonical text.
struct Setting {
  std::string name;
  std::string value;
};

// The most settings one fingerprint compares (the size of its fixed Allgather).
inline constexpr int kMaxSettings = 128;

// Every setting of `config` that the ranks must agree on: the model (sizes, gate, expert FFN,
// capacity factor, seeds), the layout (tp, ep, ranks per node, the cluster, HybridEP's member
// order), each knob of the strategy ("strategy: a2a", ...; its display name aside), the data
// (batch, sequence length, seed, the corpus's digest), the steps and optimizer, the timeout and
// the switches that add collectives. Per-rank fields (the model's shards) are left out: they
// are set from the rank later.
std::vector<Setting> train_settings(const TrainConfig& config);

// FNV-1a, 64 bits: the same text gives the same hash on every rank and machine.
uint64_t fnv1a(const std::string& text);

// The message for ranks that disagree on `name`, values[r] being rank r's value, e.g.
// "ranks disagree on gate: rank 0 has gshard, ranks 1-3 have sigmoid". A value longer than
// 48 characters is shown by its first 32 and the top 32 bits of its hash, in hex.
std::string disagreement(const std::string& name, const std::vector<std::string>& values);

// Collective over `comm` (one Allgather of kMaxSettings hashes; on a difference, one more
// exchange for that setting's values): "" when every rank holds the same settings, else on
// every rank the same message, disagreement() of the first setting that differs, followed by
// the names of the others that differ. Throws std::logic_error beyond kMaxSettings settings.
std::string compare_settings(MPI_Comm comm, const std::vector<Setting>& settings);

}  // namespace moecomm::rt
