#include "cli/bench_ops.h"

#include <algorithm>
#include <map>

namespace moecomm::cli {
namespace {

using Key = std::pair<std::string, std::string>;  // name, phase

Key key_of(const sched::Schedule& s, sched::OpId id) {
  const sched::Label& l = s.label(id);
  return {std::string(l.name()), std::string(sched::to_string(l.phase))};
}

struct Sum {
  int64_t ops = 0;  // op runs
  double seconds = 0;
};

}  // namespace

std::vector<OpComparison> compare_ops(const sched::Schedule& run,
                                      const std::vector<std::vector<rt::OpTime>>& measured,
                                      const sched::Schedule& simulated,
                                      const sim::SimResult& result) {
  std::map<Key, Sum> got, want;
  for (const auto& step : measured)
    for (sched::OpId id = 0; id < run.num_ops() && id < sched::OpId(step.size()); ++id) {
      const rt::OpTime& t = step[size_t(id)];
      if (t.start < 0) continue;
      Sum& s = got[key_of(run, id)];
      ++s.ops;
      s.seconds += t.end - t.start;
    }
  for (sched::OpId id = 0; id < simulated.num_ops(); ++id) {
    Sum& s = want[key_of(simulated, id)];
    ++s.ops;
    s.seconds += result.ops[size_t(id)].end - result.ops[size_t(id)].start;
  }
  std::map<Key, OpComparison> rows;
  const double steps = std::max<double>(1, double(measured.size()));
  for (const auto& [k, s] : got) {
    OpComparison& r = rows[k];
    r.ops = int64_t(double(s.ops) / steps + 0.5);
    r.measured_ms = s.seconds * 1e3 / double(s.ops);
  }
  for (const auto& [k, s] : want) {
    OpComparison& r = rows[k];
    if (r.ops == 0) r.ops = s.ops;
    r.simulated_ms = s.seconds * 1e3 / double(s.ops);
  }
  std::vector<OpComparison> out;
  for (auto& [k, r] : rows) {
    r.name = k.first;
    r.phase = k.second;
    out.push_back(r);
  }
  std::stable_sort(out.begin(), out.end(), [](const OpComparison& a, const OpComparison& b) {
    return a.measured_ms * double(a.ops) > b.measured_ms * double(b.ops);
  });
  return out;
}

}  // namespace moecomm::cli
