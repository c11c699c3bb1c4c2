// nccl-tests output as `profile --from-nccl-tests` reads it: the fixtures (tests/data/
// nccl_tests, in nccl-tests' layouts) and every malformed input named by file and line.
#include "cost/nccl_tests_output.h"

#include <gtest/gtest.h>

#include <sstream>
#include <string>

#include "support/expect_error.h"

namespace moecomm::cost {
namespace {

const std::string kDir = std::string(MOECOMM_TEST_DATA_DIR) + "/nccl_tests/";

const std::string kHeader =
    "# nccl-tests version 2.17.6 nccl-headers=22603 nccl-library=22603\n"
    "# Collective test starting: all_reduce_perf_mpi\n"
    "# Using devices\n"
    "#  Rank  0 Group  0 Pid  41200 on     host-a device  0 [0000:07:00] NVIDIA H100\n"
    "#  Rank  1 Group  0 Pid  41201 on     host-a device  1 [0000:0f:00] NVIDIA H100\n"
    "#  Rank  2 Group  0 Pid  41202 on     host-b device  0 [0000:07:00] NVIDIA H100\n"
    "#  Rank  3 Group  0 Pid  41203 on     host-b device  1 [0000:0f:00] NVIDIA H100\n"
    "#       size         count      type   redop    root     time   algbw   busbw #wrong     "
    "time   algbw   busbw #wrong\n"
    "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            "
    "(us)  (GB/s)  (GB/s)\n";
const std::string kRows =
    "     1048576        262144     float     sum      -1    50.00   20.97   31.46      0    "
    "51.00   20.56   30.84      0\n"
    "     2097152        524288     float     sum      -1    80.00   26.21   39.32      0    "
    "81.00   25.89   38.84      0\n";

NcclTestsRun parse(const std::string& text) {
  std::istringstream in(text);
  return parse_nccl_tests(in, "t.txt");
}

TEST(NcclTestsOutput, ReadsTheCurrentLayout) {
  const NcclTestsRun run = read_nccl_tests(kDir + "alltoall_perf.2x8.txt");
  EXPECT_EQ(run.collective, "alltoall");
  EXPECT_EQ(run.ranks, 16);
  EXPECT_EQ(run.nodes, 2);
  EXPECT_EQ(run.ranks_per_node(), 8);
  ASSERT_EQ(run.rows.size(), 13u);
  EXPECT_EQ(run.rows[0].bytes, 1048576);
  EXPECT_DOUBLE_EQ(run.rows[0].time_s, 452.37e-6);  // out-of-place, not in-place
  EXPECT_DOUBLE_EQ(run.rows[0].busbw, 2.17e9);
  EXPECT_EQ(run.rows[0].line, 26);
  EXPECT_EQ(run.rows.back().bytes, 4294967296.0);
  EXPECT_DOUBLE_EQ(run.rows.back().time_s, 0.202089);
}

TEST(NcclTestsOutput, ReadsTheOlderLayoutAndItsCommandLine) {
  // No "Collective test starting", no Group, no root column, errors printed as 0e+00.
  const NcclTestsRun run = read_nccl_tests(kDir + "all_gather_perf.1x8.txt");
  EXPECT_EQ(run.collective, "allgather");
  EXPECT_EQ(run.ranks, 8);
  EXPECT_EQ(run.nodes, 1);
  ASSERT_EQ(run.rows.size(), 13u);
  EXPECT_DOUBLE_EQ(run.rows[0].time_s, 23.42e-6);
  EXPECT_DOUBLE_EQ(run.rows[0].busbw, 39.17e9);
}

TEST(NcclTestsOutput, ASuffixedBinaryAndSizeZeroRowsAreFine) {
  const NcclTestsRun run = parse(kHeader +
                                 "           0             0     float     sum      -1     "
                                 "3.10    0.00    0.00      0     3.00    0.00    0.00      0\n" +
                                 kRows);
  EXPECT_EQ(run.collective, "allreduce");
  EXPECT_EQ(run.ranks_per_node(), 2);
  ASSERT_EQ(run.rows.size(), 2u);
  EXPECT_DOUBLE_EQ(run.rows[1].time_s, 80e-6);
}

TEST(NcclTestsOutput, MalformedInputIsNamedByFileAndLine) {
  std::string text = kHeader + kRows;
  EXPECT_ERROR_HAS(parse(text.substr(text.find("# Using"))), "t.txt",
                   "cannot tell which collective");
  EXPECT_ERROR_HAS(parse(kHeader + kRows.substr(0, kRows.find('\n') + 1)), "t.txt",
                   "fewer than 2 result rows");
  EXPECT_ERROR_HAS(parse(kHeader +
                         "     1048576        262144     float     sum      -1    "
                         "fast   20.97   31.46      0\n" +
                         kRows),
                   "t.txt:10", "time 'fast' is not a number");
  EXPECT_ERROR_HAS(parse(kHeader + "     1048576        262144     float     sum      -1\n"),
                   "t.txt:10", "columns");
  std::string wrong = kHeader + kRows;
  wrong.replace(wrong.find("31.46      0"), 12, "31.46      7");
  EXPECT_ERROR_HAS(parse(wrong), "t.txt:10", "#wrong is 7");
  EXPECT_ERROR_HAS(parse(kHeader + kRows + kRows), "t.txt:12", "sizes must grow");
  std::string twice = kHeader + kRows;
  twice.replace(twice.find("Rank  1"), 7, "Rank  0");
  EXPECT_ERROR_HAS(parse(twice), "t.txt:5", "rank 0 is listed twice");
  std::string uneven = kHeader + kRows;
  uneven.replace(uneven.find("host-b device  0"), 6, "host-a");
  EXPECT_ERROR_HAS(parse(uneven), "t.txt", "nodes must hold equal shares");
  EXPECT_ERROR_HAS(parse(kRows + kHeader), "t.txt:1", "before the column header");
  std::string other = kHeader + kRows;
  other.replace(other.find("all_reduce_perf_mpi"), 19, "sendrecv_perf");
  EXPECT_ERROR_HAS(parse(other), "t.txt:2", "is not alltoall_perf");
  EXPECT_ERROR_HAS(parse(kHeader + kRows + "# Collective test starting: alltoall_perf\n"),
                   "t.txt:12", "give each test its own file");
  EXPECT_ERROR_HAS(read_nccl_tests(kDir + "missing.txt"), "missing.txt", "cannot open");
  EXPECT_ERROR_HAS(parse(kHeader + "# " + std::string(5000, 'x') + "\n" + kRows), "t.txt:10",
                   "more than 4096 characters");
}

}  // namespace
}  // namespace moecomm::cost
