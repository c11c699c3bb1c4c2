// `moecomm profile --from-nccl-tests`'s reader of nccl-tests output: any text is either
// refused with an Error or read into a run that the fit can take (a known collective, ranks
// split evenly over nodes, at least two rows of growing positive sizes and positive times).
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <sstream>
#include <string>

#include "cost/nccl_tests_output.h"
#include "fuzz_check.h"

using namespace moecomm;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  const auto run = fuzz::accepted([&] {
    std::istringstream in(text);
    return cost::parse_nccl_tests(in, "fuzz.txt");
  });
  if (!run) return 0;
  if (run->collective != "alltoall" && run->collective != "allreduce" &&
      run->collective != "allgather" && run->collective != "reducescatter")
    fuzz::fail("unknown collective accepted: " + run->collective);
  if (run->ranks < 2 || run->nodes < 1 || run->ranks % run->nodes != 0)
    fuzz::fail("ranks not split evenly over nodes");
  if (run->rows.size() < 2) fuzz::fail("fewer than 2 rows accepted");
  for (size_t i = 0; i < run->rows.size(); ++i) {
    const auto& r = run->rows[i];
    if (!(r.bytes > 0) || !(r.time_s > 0) || !std::isfinite(r.time_s))
      fuzz::fail("a row of no size or time accepted");
    if (i > 0 && !(r.bytes > run->rows[i - 1].bytes)) fuzz::fail("sizes do not grow");
  }
  return 0;
}
