#pragma once
// The comma lists users type on the command line ("dp=2,tp=8", "base=lina,chunks=2").
#include <string>
#include <vector>

namespace moecomm::core {

// The items of `text` between commas, in order; "" has none. An empty item (",,", or a comma
// at either end) throws Error naming `where` and the item's position: it is a typo, and
// skipping it would hide one.
std::vector<std::string> split_items(const std::string& text, const std::string& where);

}  // namespace moecomm::core
