#pragma once
// HybridEP in the runtime (hybridep.txt Sec. IV). Domain-based partition (Sec. IV-A,
// Algorithm 1 on one level): an EP group of n ranks splits into expert domains of S
// consecutive members (sched::hybrid_domains, as the simulator). Inside a domain experts
// travel: before every forward each member gathers the other members' experts, so each MoE
// layer holds the S L experts of its domain (L own, the rest copies). Across domains tokens
// travel: a token for an expert of another domain goes to the member of that domain with
// this rank's offset (the A2A between equal offsets), one for an expert of its own domain is
// computed here. In the backward the copies' gradients return to their owners, summed
// (ReduceScatter over the domain), so the owners' experts train as under plain EP.
//
// Parameter-efficient migration (Sec. IV-B): with compression < 1 an expert travels as its
// top-k residual against the shared expert, the average of the layer's E experts, which an
// asynchronous AllReduce over the EP group refreshes in every backward (nn/sr_codec.h); the
// owner keeps and trains the exact weights. The asynchronous communicator (Fig. 10): the
// send queue is encoded at the start of the iteration (right after the optimizer step) and
// the AllGathers run layer by layer on a copy stream beside the pre-expert compute; each
// layer drains its receive queue (waits, decodes) just before its MoE forward.
#include <future>
#include <memory>
#include <vector>

#include "core/parallel_config.h"
#include "nn/moe_layer.h"
#include "rt/comm.h"
#include "rt/comm_pool.h"
#include "rt/copy_stream.h"
#include "rt/hybrid_codec.h"
#include "rt/link_bytes.h"
#include "rt/wait.h"

namespace moecomm::rt {

// This rank's place in the partition of its EP group `ep` (global ranks) into domains of
// `domain_size` consecutive positions of `order` (position -> EP member index, from
// sched::hybrid_member_order; empty: the identity). The rank at position p owns experts
// [p L, (p + 1) L). Throws moecomm::Error naming `where` unless domain_size divides the EP
// size and order is a permutation of it.
struct HybridLayout {
  int domain_size = 1;
  int offset = 0;          // this rank's index in its domain
  int position = 0;        // in the order: this rank owns experts [position L, (position + 1) L)
  core::RankGroup domain;  // the members it exchanges experts with (AllGather), itself included
  core::RankGroup peers;   // the members at its offset in every domain: the token A2A
};
HybridLayout hybrid_layout(const core::RankGroup& ep, int ep_index, int domain_size,
                           const std::vector<int>& order, const std::string& where);

// Every rank's domain and peer groups (the token path on channel 0, the expert transfers and
// the shared expert's AllReduce on `channel`), the same list on every rank.
std::vector<CommKey> hybrid_comm_keys(const core::ParallelConfig& parallel, int domain_size,
                                      const std::vector<int>& order, int channel);

struct HybridConfig {
  double compression = 1.0;   // sched::Strategy::compression: 1 sends experts as they are
  bool shared_expert = true;  // residuals against the shared expert (w/ S) or zero (w/o S)
  int experts = 0;            // E, the layer's experts over the EP group (the shared average)
  CallOptions call;           // timeout and ranks per node; labels are set per op
  // Error feedback (Strategy::sr_feedback): every copy holder keeps the residual it has
  // received so far, R; each step sends the top-k of w - (s + R) and adds it to R, so a copy
  // converges to its owner's expert instead of losing the residual's tail every step.
  bool feedback = false;
};

class HybridExperts {
 public:
  // layers: the model's MoE layers, each holding its domain's S L experts in member order, of
  // which local experts [owned_first, owned_first + owned) are this rank's (owned_first =
  // offset L). domain: the domain's communicator; ep: the EP group's (shared expert).
  // Collective over the EP group when the shared expert is on (its first average).
  HybridExperts(std::vector<nn::MoeLayer*> layers, int owned_first, int owned, const Comm& domain,
                const Comm& ep, const HybridConfig& config);
  ~HybridExperts();

  // Iteration start: encodes every layer's own experts and queues their AllGathers.
  void start_iteration();
  // Before layer l's MoE forward: waits for its AllGather and decodes the copies.
  void receive(int layer);
  // Backward, once layer l's expert gradients are complete: queues the copies' gradient
  // return and the shared expert's AllReduce. wait_grads(l): the own experts' gradients are
  // complete; finish(): everything queued is done.
  void return_grads(int layer);
  void wait_grads(int layer);
  void finish();

  // Bytes this rank sent for expert transfers (AllGather, gradient return, shared expert).
  LinkBytes bytes() const { return bytes_; }
  void reset_bytes() { bytes_ = {}; }
  int64_t encoded_bytes_per_expert() const;  // what one expert costs on the wire

 private:
  void sum_shared(int l, LinkBytes* bytes);  // the shared expert's sum, AllReduced
  CallOptions call(const std::string& label, int layer) const;

  HybridCodec codec_;
  struct Pending;
  std::vector<std::unique_ptr<Pending>> pending_;  // per layer: received bytes, futures
  const Comm& domain_;
  const Comm& ep_;
  HybridConfig config_;
  LinkBytes bytes_;                     // written on the copy stream only
  std::unique_ptr<CopyStream> stream_;  // last member: joined first
};

}  // namespace moecomm::rt
