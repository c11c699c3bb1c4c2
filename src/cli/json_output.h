#pragma once
// What the commands print with --json: every figure to 12 significant digits. That is far
// finer than any model or measurement here (the simulator's completion tolerance alone is
// 0.5%), and coarse enough to drop the rounding that the arithmetic making a figure leaves in
// its last digits (64.4445094399999 ms summed from thousands of op times, for 64.44450944), so
// that a reader never has to wonder whether a digit means something.
#include <string>

#include <nlohmann/json.hpp>

namespace moecomm::cli {

inline constexpr int kFigureDigits = 12;

// x to kFigureDigits significant digits (nearest); non-finite values and 0 unchanged.
double round_figure(double x);

// j with every floating-point number rounded by round_figure, dumped with `indent` (-1: one
// line). Integers (counts, bytes) and strings are printed as they are.
std::string dump_json(nlohmann::json j, int indent = 2);

}  // namespace moecomm::cli
