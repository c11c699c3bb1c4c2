// `moecomm sim --svg` rendered to PNG by Debian's rsvg-convert (package librsvg2-bin, which
// scripts/install-deps.sh installs): the timeline is well-formed XML and draws at the size it
// declares.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "support/cli_runner.h"

namespace moecomm::cli {
namespace {

using testing::Result;
using testing::run_cli;

// The executable `program` in a PATH directory, or "".
std::string find_on_path(const std::string& program) {
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path == nullptr ? "" : path);
  for (std::string dir; std::getline(dirs, dir, ':');) {
    const std::string candidate = (dir.empty() ? "." : dir) + "/" + program;
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return "";
}

// The exit status of `command` run by the shell; -1 when it did not exit normally.
int shell(const std::string& command) {
  const int status = std::system(command.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// A PNG's width and height: its 8-byte signature, then the IHDR chunk (length, "IHDR", then
// width and height as 4-byte big-endian integers). {0, 0} when the file is no PNG.
std::array<uint32_t, 2> png_size(const std::string& path) {
  const std::string png = read_text(path);
  if (png.size() < 24 || png.compare(0, 8, "\x89PNG\r\n\x1a\n") != 0 ||
      png.compare(12, 4, "IHDR") != 0)
    return {0, 0};
  auto be32 = [&](size_t at) {
    uint32_t v = 0;
    for (size_t i = 0; i < 4; ++i) v = v << 8 | static_cast<unsigned char>(png[at + i]);
    return v;
  };
  return {be32(16), be32(20)};
}

size_t count(const std::string& text, const std::string& part) {
  size_t n = 0;
  for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
  return n;
}

TEST(SvgRender, SimTimelineIsWellFormedAndRendersAtItsDeclaredSize) {
  const std::string rsvg = find_on_path("rsvg-convert");
  ASSERT_FALSE(rsvg.empty())
      << "rsvg-convert is not on PATH: install Debian's librsvg2-bin (scripts/install-deps.sh "
         "installs it)";
  const std::string svg = ::testing::TempDir() + "/svg_render_test.svg";
  const std::string png = ::testing::TempDir() + "/svg_render_test.png";
  std::remove(png.c_str());
  const Result r = run_cli({"sim", "--strategy", "fsmoe", "--ranks", "0-3", "--svg", svg});
  ASSERT_EQ(r.code, 0) << r.err;

  ASSERT_EQ(shell("python3 -c 'import sys, xml.etree.ElementTree as e; e.parse(sys.argv[1])' '" +
                  svg + "'"),
            0)
      << svg << " is not well-formed XML";
  ASSERT_EQ(shell("'" + rsvg + "' -o '" + png + "' '" + svg + "'"), 0)
      << "rsvg-convert could not render " << svg;

  // 170 px of row names, a 1500 px axis and 30 px of margin; 72 px above the rows of 14 px
  // (one per named stream row) and 26 below.
  const std::string text = read_text(svg);
  const size_t rows = count(text, "<text class=\"stream\"");
  EXPECT_EQ(rows, 16u);  // 4 ranks x (compute, token comm, grad sync, intra-node comm)
  const std::array<uint32_t, 2> want = {1700, uint32_t(72 + 14 * rows + 26)};
  EXPECT_EQ(png_size(png), want);
  EXPECT_NE(text.find("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"1700\" height=\"" +
                      std::to_string(want[1]) + "\""),
            std::string::npos);
}

}  // namespace
}  // namespace moecomm::cli
