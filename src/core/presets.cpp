#include "core/presets.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>

#include "core/error.h"
#include "core/json_reader.h"

#ifndef MOECOMM_DATA_DIR
#define MOECOMM_DATA_DIR "data"
#endif

namespace moecomm::core {

namespace fs = std::filesystem;

std::string data_dir() {
  const char* env = std::getenv("MOECOMM_DATA_DIR");
  return env && *env ? env : MOECOMM_DATA_DIR;
}

std::vector<std::string> list_presets(const std::string& kind) {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(fs::path(data_dir()) / kind, ec))
    if (entry.path().extension() == ".json") names.push_back(entry.path().stem().string());
  std::sort(names.begin(), names.end());
  return names;
}

namespace {

bool looks_like_file(const std::string& arg) {
  return arg.find('/') != std::string::npos ||
         (arg.size() > 5 && arg.substr(arg.size() - 5) == ".json") || fs::is_regular_file(arg);
}

// The file to read for `arg`, and the name errors should use for it.
std::string resolve(const std::string& arg, const std::string& kind, const std::string& what) {
  if (arg.empty()) throw Error(what, "empty name");
  if (looks_like_file(arg)) {
    if (!fs::is_regular_file(arg)) throw Error(arg, "no such " + what + " file");
    return arg;
  }
  fs::path preset = fs::path(data_dir()) / kind / (arg + ".json");
  if (fs::is_regular_file(preset)) return preset.string();
  std::string known;
  for (const auto& n : list_presets(kind)) known += (known.empty() ? "" : ", ") + n;
  throw Error(what + " \"" + arg + "\"",
              "no such preset or file (presets: " +
                  (known.empty() ? "none found in " + data_dir() : known) + ")");
}

}  // namespace

Cluster load_cluster(const std::string& name_or_file) {
  std::string path = resolve(name_or_file, "clusters", "cluster");
  return parse_cluster(read_json_file(path), path);
}

ModelConfig load_model(const std::string& name_or_file) {
  std::string path = resolve(name_or_file, "models", "model");
  return parse_model(read_json_file(path), path);
}

}  // namespace moecomm::core
