#include "core/suggest.h"

#include <algorithm>

namespace moecomm::core {

int edit_distance(std::string_view a, std::string_view b) {
  const size_t n = a.size(), m = b.size();
  // d[i][j]: the distance between a's first i and b's first j characters.
  std::vector<std::vector<int>> d(n + 1, std::vector<int>(m + 1, 0));
  for (size_t i = 0; i <= n; ++i) d[i][0] = static_cast<int>(i);
  for (size_t j = 0; j <= m; ++j) d[0][j] = static_cast<int>(j);
  for (size_t i = 1; i <= n; ++i) {
    for (size_t j = 1; j <= m; ++j) {
      const int substitute = d[i - 1][j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1);
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, substitute});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  }
  return d[n][m];
}

std::vector<std::string> near_names(std::string_view typed, const std::vector<std::string>& names) {
  // A third of the typed length: "chunk" may miss one letter, "grad_partition" four; a
  // two-letter key one, so "zz" suggests nothing.
  const int limit = std::max(1, static_cast<int>(typed.size()) / 3);
  int best = limit + 1;
  std::vector<std::string> out;
  for (const std::string& name : names) {
    const int d = edit_distance(typed, name);
    if (d == 0) return {};
    if (d < best) {
      best = d;
      out.clear();
    }
    if (d == best) out.push_back(name);
  }
  // More than three equally near ("xp": dp, tp, ep, pp, cp) is no hint; the caller's list
  // of accepted names says as much.
  if (out.size() > 3) out.clear();
  return out;
}

std::string did_you_mean(std::string_view typed, const std::vector<std::string>& names) {
  const std::vector<std::string> near = near_names(typed, names);
  if (near.empty()) return "";
  std::string out = "; did you mean ";
  for (size_t i = 0; i < near.size(); ++i) {
    if (i > 0) out += i + 1 == near.size() ? " or " : ", ";
    out += "'" + near[i] + "'";
  }
  return out + "?";
}

}  // namespace moecomm::core
