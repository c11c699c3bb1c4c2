#pragma once
// The MoE layers' part of rt::ModelBinding: how every MoE layer's tokens travel through the
// training step's schedule, one implementation per way: the token path's A2As
// (TokenPathBinding: plain EP, MoNTA's TP drop, ESP, HybridEP's peers, bf16 rows) or NetMoE's
// sample moving (NetMoeBinding). ModelBinding picks one from the schedule's ops, registers its
// kernels beside the dense ones, and hands it the MoE layers' collectives.
#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <vector>

#include "rt/executor.h"
#include "sched/schedule.h"

namespace moecomm::rt {

// What the schedule has of one MoE layer's token path in one phase, on this rank: its chunk
// count and which of the path's ops.
struct MoeOps {
  int chunks = 1;
  bool dispatch = false, gather = false, gather_copy = false, reduce = false, combine = false,
       tp_gather = false, combine_copy = false;

  void add(const sched::Label& label);  // one of the layer's ops (any MoE family)
  bool beside_a2a() const { return gather || reduce || tp_gather; }  // ESP/TP collectives
};
// Per MoE layer, its forward's and backward's.
using MoeLayerOps = std::vector<std::array<MoeOps, 2>>;

inline int phase_index(sched::Phase phase) {
  return phase == sched::Phase::kBackward ? 1 : 0;
}

class MoePathBinding {
 public:
  using Kernel = std::function<void(const sched::Label&)>;
  virtual ~MoePathBinding() = default;

  // The kernels of the MoE layers' compute and copy ops (the gate, the experts and the path's
  // own), by role.
  virtual void add_kernels(std::map<sched::OpRole, Kernel>& kernels) = 0;
  // Whether collectives of `role` are this path's; their buffers and epilogues.
  virtual bool has_buffer(sched::OpRole role) const = 0;
  virtual OpBuffer* buffer(sched::OpRole role, int layer, int phase, int chunk) = 0;
  virtual void after(sched::OpRole role, int layer, int phase, int chunk) = 0;

  virtual void start_step(const std::vector<int>& targets, int seq_len) = 0;
  // Where the dense blocks meet the layer: its output becomes the residual stream (before the
  // next block's attention or the head), and the stream's gradient enters its backward.
  virtual void forward_done(int layer) = 0;
  virtual void backward_begin(int layer) = 0;
  // Metadata bytes this step sent to each world rank (the layout's counts, NetMoE's metadata
  // columns), counted apart from the token rows.
  virtual const std::vector<int64_t>& meta_bytes() const = 0;
};

}  // namespace moecomm::rt
