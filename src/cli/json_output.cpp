#include "cli/json_output.h"

#include <cfloat>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace moecomm::cli {

namespace {

void round_figures(nlohmann::json& j) {
  if (j.is_number_float()) {
    j = round_figure(j.get<double>());
  } else if (j.is_structured()) {
    for (auto& item : j) round_figures(item);
  }
}

}  // namespace

double round_figure(double x) {
  if (!std::isfinite(x) || x == 0) return x;
  // The nearest double to a decimal of at most DBL_DIG digits prints back as that decimal
  // (shortest round trip), so the JSON shows exactly the rounded figure.
  static_assert(kFigureDigits <= DBL_DIG);
  char text[64];
  std::snprintf(text, sizeof text, "%.*g", kFigureDigits, x);
  return std::strtod(text, nullptr);
}

std::string dump_json(nlohmann::json j, int indent) {
  round_figures(j);
  return j.dump(indent);
}

}  // namespace moecomm::cli
