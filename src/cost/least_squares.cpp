#include "cost/least_squares.h"

#include <cmath>
#include <string>

#include "core/error.h"

namespace moecomm::cost {

LineFit fit_alpha_beta(const std::vector<std::pair<double, double>>& samples) {
  const double n = static_cast<double>(samples.size());
  double sx = 0, sy = 0;
  for (size_t i = 0; i < samples.size(); ++i) {
    auto [x, y] = samples[i];
    if (!std::isfinite(x) || !std::isfinite(y) || x < 0 || y < 0)
      throw Error("samples[" + std::to_string(i) + "]", "size and time must be finite and >= 0");
    sx += x;
    sy += y;
  }
  if (samples.size() < 2) throw Error("alpha-beta fit", "needs at least two samples");
  const double mx = sx / n, my = sy / n;
  double sxx = 0, sxy = 0, syy = 0;
  for (auto [x, y] : samples) {
    sxx += (x - mx) * (x - mx);
    sxy += (x - mx) * (y - my);
    syy += (y - my) * (y - my);
  }
  if (sxx == 0) throw Error("alpha-beta fit", "needs at least two distinct sizes");
  LineFit fit;
  fit.line.beta = sxy / sxx;
  fit.line.alpha = my - fit.line.beta * mx;
  double ss_res = 0;
  for (auto [x, y] : samples) {
    double e = y - fit.line.time(x);
    ss_res += e * e;
  }
  fit.r_squared = syy > 0 ? 1.0 - ss_res / syy : 1.0;
  return fit;
}

}  // namespace moecomm::cost
