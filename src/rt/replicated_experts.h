#pragma once
// Expert weights for Lina's inference (lina.txt Sec. 6.2): "each device saves the weights of
// all experts in their host DRAM" and "swap[s] in the expert weights" the plan puts on it,
// with "a maximum number of experts per device to control the overhead of swapping".
// Host store: the E experts, built as the baseline builds them (make_expert with
// expert_seed(seed, e)), so a resident copy holds exactly the baseline's weights.
// Device: max_experts_per_device slots; swapping expert e in copies its parameters from the
// host store into a free slot. Experts that stay resident across plans are not copied again.
#include <cstdint>
#include <memory>
#include <vector>

#include "nn/expert.h"

namespace moecomm::rt {

class ExpertSwapper {
 public:
  ExpertSwapper(core::FfnType kind, int hidden, int ffn_hidden, uint64_t seed, int experts,
                int max_experts_per_device);

  // Makes exactly `experts` (distinct, at most max_experts_per_device) resident: keeps the
  // ones already in a slot, evicts the others and copies the missing ones in. Returns how
  // many were swapped in.
  int swap_in(const std::vector<int>& experts);

  bool resident(int e) const { return slot_of(e) >= 0; }
  // The device copy of expert e; throws moecomm::Error when e is not resident.
  const nn::Expert& expert(int e) const;

  int64_t swaps() const { return swaps_; }  // experts copied host -> device so far
  int64_t swapped_bytes() const { return swapped_bytes_; }
  int slots() const { return static_cast<int>(slots_.size()); }

 private:
  int slot_of(int e) const;

  std::vector<std::unique_ptr<nn::Expert>> host_;
  struct Slot {
    int expert = -1;  // -1: free
    std::unique_ptr<nn::Expert> weights;
  };
  std::vector<Slot> slots_;
  int64_t swaps_ = 0, swapped_bytes_ = 0;
};

}  // namespace moecomm::rt
