#pragma once
// Near-miss suggestions for names a user types (strategy names, knobs, parallel keys): a
// typo gets "did you mean ...?" instead of only the list of what is accepted.
#include <string>
#include <string_view>
#include <vector>

namespace moecomm::core {

// Optimal string alignment distance: insertions, deletions, substitutions and swaps of two
// adjacent characters ("chukns" is one edit from "chunks") each count 1.
int edit_distance(std::string_view a, std::string_view b);

// The names nearest to `typed` when they are near enough to be a typo of it: at most
// max(1, typed.size() / 3) edits away. Up to three at the same distance are all returned, in
// the order of `names`; none when more are, or when `typed` is itself a name.
std::vector<std::string> near_names(std::string_view typed, const std::vector<std::string>& names);

// "; did you mean 'chunks'?" (or "'dp' or 'ep'?") for near_names(typed, names); "" when none.
std::string did_you_mean(std::string_view typed, const std::vector<std::string>& names);

}  // namespace moecomm::core
