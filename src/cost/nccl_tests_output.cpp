#include "cost/nccl_tests_output.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>

#include "core/error.h"

namespace moecomm::cost {

namespace {

constexpr size_t kMaxLine = 4096;

// The four binaries and the efficiency-curve key of each.
const std::vector<std::pair<std::string, std::string>>& binaries() {
  static const std::vector<std::pair<std::string, std::string>> names = {
      {"alltoall_perf", "alltoall"},
      {"all_reduce_perf", "allreduce"},
      {"all_gather_perf", "allgather"},
      {"reduce_scatter_perf", "reducescatter"}};
  return names;
}

std::string collective_in(const std::string& text) {
  for (const auto& [binary, key] : binaries())
    if (text.find(binary) != std::string::npos) return key;
  return "";
}

std::vector<std::string> tokens(const std::string& line) {
  std::istringstream in(line);
  std::vector<std::string> out;
  for (std::string t; in >> t;) out.push_back(t);
  return out;
}

double number(const std::string& text, const std::string& at, const std::string& what) {
  try {
    size_t used = 0;
    const double v = std::stod(text, &used);
    if (used == text.size() && std::isfinite(v)) return v;
  } catch (const std::exception&) {
  }
  throw Error(at, what + " '" + text + "' is not a number");
}

}  // namespace

NcclTestsRun parse_nccl_tests(std::istream& in, const std::string& where) {
  static const std::regex rank_line(
      R"(^#\s*Rank\s+(\d{1,7})\s+(?:Group\s+\d+\s+)?Pid\s+\d+\s+on\s+(\S+)\s+device\s+\d+.*)");
  static const std::regex starting(R"(^#\s*Collective test starting:\s*(\S+).*)");
  NcclTestsRun run;
  run.where = where;
  std::string named;  // from the first line naming a binary
  std::set<int> ranks;
  std::set<std::string> hosts;
  std::map<std::string, int> per_host;
  int time_col = -1, busbw_col = -1, wrong_col = -1;
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    const std::string at = where + ":" + std::to_string(n);
    // nccl-tests' lines are short (its device lines are cut at 2048 characters); a longer one
    // is another file, and would make std::regex recurse once per character.
    if (line.size() > kMaxLine)
      throw Error(at, "a line of more than " + std::to_string(kMaxLine) +
                          " characters: not nccl-tests output");
    std::smatch m;
    if (std::regex_match(line, m, starting)) {
      const std::string key = collective_in(m[1]);
      if (key.empty())
        throw Error(at, "'" + std::string(m[1]) +
                            "' is not alltoall_perf, all_reduce_perf, all_gather_perf or "
                            "reduce_scatter_perf");
      if (!run.collective.empty() && run.collective != key)
        throw Error(at, "a second test (" + key + " after " + run.collective +
                            "): give each test its own file");
      run.collective = key;
      continue;
    }
    if (named.empty()) named = collective_in(line);
    if (std::regex_match(line, m, rank_line)) {
      const int rank = std::stoi(m[1]);
      if (!ranks.insert(rank).second)
        throw Error(at, "rank " + std::string(m[1]) +
                            " is listed twice (nccl-tests built without MPI runs one job per "
                            "process: build it with MPI=1)");
      ++per_host[m[2]];
      continue;
    }
    const std::vector<std::string> t = tokens(line);
    if (t.empty()) continue;
    if (t[0] == "#") {
      // The column header: "#  size  count  type  redop  root  time  algbw  busbw  #wrong ...".
      if (t.size() > 1 && t[1] == "size" && std::find(t.begin(), t.end(), "busbw") != t.end()) {
        for (size_t i = 1; i < t.size(); ++i) {
          const int col = static_cast<int>(i) - 1;  // index in a row's tokens
          if ((t[i] == "time" || t[i] == "cputime") && time_col < 0) time_col = col;
          if (t[i] == "busbw" && busbw_col < 0) busbw_col = col;
          if ((t[i] == "#wrong" || t[i] == "error") && wrong_col < 0) wrong_col = col;
        }
        if (time_col < 0) throw Error(at, "the column header has no time column");
      }
      continue;
    }
    if (t[0][0] == '#' ||
        !std::all_of(t[0].begin(), t[0].end(), [](unsigned char ch) { return std::isdigit(ch); }))
      continue;
    if (time_col < 0)
      throw Error(at, "a result row before the column header (\"#  size  count  type ...\")");
    if (static_cast<int>(t.size()) <= std::max({time_col, busbw_col, wrong_col}))
      throw Error(
          at, "a result row with " + std::to_string(t.size()) + " columns; the header has more");
    NcclTestsRow row;
    row.line = n;
    row.bytes = number(t[0], at, "size");
    if (row.bytes == 0) continue;  // no bytes: nothing to fit
    row.time_s = number(t[time_col], at, "time") * 1e-6;
    row.busbw = number(t[busbw_col], at, "busbw") * 1e9;
    if (!(row.time_s > 0)) throw Error(at, "time must be positive, got '" + t[time_col] + "'");
    // #wrong (older versions: "error", printed as 0e+00); N/A when the check was off.
    if (wrong_col >= 0 && t[wrong_col] != "N/A" && number(t[wrong_col], at, "#wrong") != 0)
      throw Error(at, "#wrong is " + t[wrong_col] + ": the run failed nccl-tests' own check");
    if (!run.rows.empty() && row.bytes <= run.rows.back().bytes)
      throw Error(at, "sizes must grow from row to row");
    run.rows.push_back(row);
  }
  if (run.collective.empty()) run.collective = named;
  if (run.collective.empty())
    throw Error(where,
                "cannot tell which collective: no '# Collective test starting: ...' line and no "
                "line naming alltoall_perf, all_reduce_perf, all_gather_perf or "
                "reduce_scatter_perf");
  if (ranks.empty())
    throw Error(where,
                "no '#  Rank  R Group  G Pid  P on HOST device D' lines: the ranks and "
                "nodes are unknown");
  if (*ranks.rbegin() + 1 != static_cast<int>(ranks.size()))
    throw Error(where, "ranks 0.." + std::to_string(*ranks.rbegin()) + " are not all listed");
  run.ranks = static_cast<int>(ranks.size());
  run.nodes = static_cast<int>(per_host.size());
  for (const auto& [host, count] : per_host)
    if (count != run.ranks / run.nodes || run.ranks % run.nodes != 0)
      throw Error(where, "host " + host + " has " + std::to_string(count) + " of " +
                             std::to_string(run.ranks) + " ranks: nodes must hold equal shares");
  if (run.ranks < 2) throw Error(where, "one rank: a collective needs at least 2");
  if (run.rows.size() < 2) throw Error(where, "fewer than 2 result rows of a positive size");
  return run;
}

NcclTestsRun read_nccl_tests(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw Error(path, "cannot open the file");
  return parse_nccl_tests(in, path);
}

}  // namespace moecomm::cost
