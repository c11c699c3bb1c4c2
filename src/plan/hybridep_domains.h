#pragma once
// HybridEP domain-based partition at GPU level (HybridEP Sec. IV-A): Algorithm 1 decides, for
// two GPUs and one level of the multilevel description, whether they exchange experts
// (AllGather, inside an expert domain), tokens (A2A, across domains) or nothing; the counts of
// such GPU pairs are HybridEP's "communication frequency" (Table VII).
#include <vector>

namespace moecomm::plan {

enum class HybridEpComm { kNone, kAllGather, kAllToAll };

// HybridEP Algorithm 1 for GPUs m and n at `level`. loc_m, loc_n: their multilevel locations
// (x_0, ..., x_{L-1}) from HybridEP Eq. 13, outermost first (core's Topology::location);
// domain_size: S_ED at `level`. Throws moecomm::Error on locations of different lengths,
// negative coordinates, a level outside them or a domain size below 1.
//
// Correction to the paper: Algorithm 1 line 8 only compares the coordinates after `level`
// (Loc[l+1:]), and its lines 8 and 12 name Loc_D, Loc_E, ED_D, ED_E, off_D, off_E for GPUs m
// and n. We read the names as m and n, and let two GPUs talk at `level` only when ALL their
// other coordinates agree (Loc[:l] too). Why: a level's link joins workers inside one worker
// of the level above (Sec. IV-A "Level is a set of workers that are connected with
// homogeneous bandwidth"); with the literal line 8, GPU 0 of DC 0 and GPU 1 of DC 1 would be
// paired at the GPU level and use the intra-DC link across DCs. The corrected rule is the
// usual hierarchical one (each pair of workers differs at exactly one level); both readings
// coincide for a single level, so Table VII is unaffected.
HybridEpComm hybridep_comm_type(const std::vector<int>& loc_m, const std::vector<int>& loc_n,
                                int level, int domain_size);

// Ordered GPU pairs (m, n), m != n, that communicate at one level.
struct HybridEpCommCounts {
  long long all_to_all = 0;
  long long all_gather = 0;
};

// Per level (outermost first), by running Algorithm 1 on every ordered GPU pair and level:
// O(G^2 L) for G GPUs, meant for checks and small clusters. level_counts: SF^l (>= 1);
// domain_sizes: S_ED^l, each >= 1 and dividing SF^l (HybridEP: "each domain has the same
// size"). Throws moecomm::Error otherwise.
std::vector<HybridEpCommCounts> hybridep_enumerate_comms(const std::vector<int>& level_counts,
                                                         const std::vector<int>& domain_sizes);

// The same counts in closed form. At level l the GPUs that differ only at l form G / SF^l
// groups of SF^l; in each, a GPU gathers from the S^l - 1 others of its domain and sends
// tokens to the SF^l / S^l - 1 GPUs with its offset in the other domains. So per level:
// AllGather = G (S^l - 1), A2A = G (SF^l / S^l - 1). Single level with G = EP size gives
// HybridEP Table VII.
std::vector<HybridEpCommCounts> hybridep_count_comms(const std::vector<int>& level_counts,
                                                     const std::vector<int>& domain_sizes);

// Sum over levels.
HybridEpCommCounts hybridep_total_comms(const std::vector<HybridEpCommCounts>& per_level);

}  // namespace moecomm::plan
