#pragma once
// A cluster fitted to nccl-tests measurements (`moecomm profile --from-nccl-tests`): levels
// "node" (the whole node's NICs, from the files that span several nodes) and "gpu" (one
// GPU's intra-node bandwidth, from the single-node files), each with a latency, a bandwidth
// and an efficiency curve per collective, chosen so that `sim --collective` reproduces every
// measured time.
//
// The model is the simulator's (sim/collective_flows.h, sim/network_model.h): a collective of
// size S over n = nodes x r ranks takes max over its levels l of
//   steps x L_l + c_l S / (B_l e_l(S)),
// where a ring (AllReduce: steps 2(n-1); AllGather, ReduceScatter: n-1) puts c = nccl-tests'
// bus factor on every link it crosses (one flow per node's NICs, one per GPU), and a flat
// all-to-all (steps 1) puts c = r(n-r)/n on a node's NICs and (r-1)/n on a GPU's link.
// The fit, level by level (gpu first; the node level's rows then use the gpu term as fitted):
// - L_l: the smallest intercept, over the level's files, of the line through their four
//   smallest sizes, divided by the file's steps (at least 0; at most half of any time there);
// - B_l: the highest bandwidth c S / (t - steps L) any row of the level shows;
// - e_l(S) per collective: that row's bandwidth / B_l (the mean over files at equal sizes),
//   in [0.001, 1]. A multi-node row that the gpu term alone already explains sets no point.
#include <string>
#include <vector>

#include "core/cluster.h"
#include "cost/nccl_tests_output.h"

namespace moecomm::plan {

struct NcclCheck {    // one measured row beside the fitted cluster's simulated one
  std::string where;  // file:line
  std::string collective;
  int ranks = 0;
  double bytes = 0;
  double measured_busbw = 0;  // bytes/s, as the file prints it (size / time x bus factor)
  double fitted_busbw = 0;    // bytes/s, sim --collective on the fitted cluster
};

struct NcclCalibration {
  core::Cluster cluster;
  std::vector<NcclCheck> checks;
  std::vector<std::string> notes;  // rows the fit could not reproduce, and why
};

// base: the cluster whose device (nccl-tests measures no compute), network_priorities and
// fairness the result keeps; name: the result's. Throws Error naming the file on
// inconsistent inputs (ranks per node differ, a multi-node file without a single-node one).
NcclCalibration calibrate_from_nccl_tests(const std::vector<cost::NcclTestsRun>& runs,
                                          const core::Cluster& base, const std::string& name);

}  // namespace moecomm::plan
