#pragma once
// HybridEP's domain-based partition (hybridep.txt Sec. IV-A, Algorithm 1 on one level): an EP
// group of n ranks splits into expert domains of S consecutive members (sched::hybrid_domains,
// as the simulator). Inside a domain experts travel (the domain AllGather); across domains
// tokens travel: a token for an expert of another domain goes to the member of that domain
// with this rank's offset (the A2A between equal offsets).
#include <string>
#include <vector>

#include "core/parallel_config.h"
#include "rt/comm_pool.h"

namespace moecomm::rt {

// This rank's place in the partition of its EP group `ep` (global ranks) into domains of
// `domain_size` consecutive positions of `order` (position -> EP member index, from
// sched::hybrid_member_order; empty: the identity), in global ranks: sched::HybridRouting's
// answer for member `ep_index`. The rank at position p owns experts [p L, (p + 1) L). Throws
// moecomm::Error naming `where` unless domain_size divides the EP size and order is a
// permutation of it.
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

}  // namespace moecomm::rt
