#pragma once
// Reading an SVG's text back in tests, without an XML library: the exported timeline writes
// one element per line with no nesting inside <text>.
#include <string>
#include <vector>

namespace moecomm::test {

// The texts of the elements whose start tag begins with `open` (e.g. `<text class="stream"`).
inline std::vector<std::string> svg_texts(const std::string& svg, const std::string& open) {
  std::vector<std::string> out;
  for (size_t at = svg.find(open); at != std::string::npos; at = svg.find(open, at + 1)) {
    const size_t begin = svg.find('>', at) + 1;
    out.push_back(svg.substr(begin, svg.find('<', begin) - begin));
  }
  return out;
}

}  // namespace moecomm::test
