#pragma once
// The text that NVIDIA's nccl-tests print (alltoall_perf, all_reduce_perf, all_gather_perf,
// reduce_scatter_perf), read for `moecomm profile --from-nccl-tests`. What is relied on:
// - the collective: the binary's name, from the line "# Collective test starting: NAME"
//   (nccl-tests 2.13 and later) or, in older output, from the first line that names one of
//   the four binaries (the command line kept with the output); a suffix such as _mpi is fine;
// - the ranks: the "#  Rank  R Group  G Pid  P on HOST device D ..." lines ("Group" is absent
//   in older versions), one per rank; ranks per node = ranks / distinct hosts, equal on every
//   host;
// - the results: the column header line "#  size  count  type  redop  root  time  algbw
//   busbw  #wrong ..." (root absent in older versions), then one row per size; the first
//   time (us) column is the out-of-place time, the one used. Rows of size 0 are skipped; a
//   row whose #wrong is not 0 is refused (the run failed its own check).
#include <iosfwd>
#include <string>
#include <vector>

namespace moecomm::cost {

struct NcclTestsRow {
  double bytes = 0;   // nccl-tests' size S
  double time_s = 0;  // out-of-place
  double busbw = 0;   // bytes/s, as printed
  int line = 0;       // 1-based line in the file
};

struct NcclTestsRun {
  std::string where;       // the file name
  std::string collective;  // "alltoall", "allreduce", "allgather" or "reducescatter"
  int ranks = 0;
  int nodes = 0;  // distinct hosts
  int ranks_per_node() const { return ranks / nodes; }
  std::vector<NcclTestsRow> rows;
};

// Throws moecomm::Error naming `where` and the line on malformed input.
NcclTestsRun parse_nccl_tests(std::istream& in, const std::string& where);
NcclTestsRun read_nccl_tests(const std::string& path);

}  // namespace moecomm::cost
