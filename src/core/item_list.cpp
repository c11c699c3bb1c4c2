#include "core/item_list.h"

#include "core/error.h"

namespace moecomm::core {

std::vector<std::string> split_items(const std::string& text, const std::string& where) {
  std::vector<std::string> items;
  if (text.empty()) return items;
  size_t at = 0;
  while (true) {
    const size_t comma = text.find(',', at);
    items.push_back(text.substr(at, comma == std::string::npos ? std::string::npos : comma - at));
    if (items.back().empty())
      throw Error(where, "item " + std::to_string(items.size()) + " of \"" + text +
                             "\" is empty (separate items by single commas, none at either end)");
    if (comma == std::string::npos) return items;
    at = comma + 1;
  }
}

}  // namespace moecomm::core
