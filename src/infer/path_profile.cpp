#include "infer/path_profile.h"

#include <algorithm>
#include <string>

#include "core/error.h"

namespace moecomm::infer {

namespace {

// Builds the sorted distribution from (expert, count) pairs over `total` token-slots.
Distribution to_distribution(std::vector<std::pair<int32_t, int64_t>> counts, int64_t total) {
  std::sort(counts.begin(), counts.end(), [](const auto& a, const auto& b) {
    return a.second != b.second ? a.second > b.second : a.first < b.first;
  });
  Distribution d;
  d.reserve(counts.size());
  for (const auto& [e, c] : counts)
    d.push_back({e, static_cast<double>(c) / static_cast<double>(total)});
  return d;
}

struct PathCounts {
  int64_t tokens = 0;
  // expert at layer i+1 -> token-slots; a path leads to few experts, a scan beats a hash
  std::vector<std::pair<int32_t, int64_t>> next;

  void add(int32_t e) {
    for (auto& [x, c] : next)
      if (x == e) {
        ++c;
        return;
      }
    next.emplace_back(e, 1);
  }
};

}  // namespace

int32_t PathProfile::checked_id(int32_t e) const {
  if (e < 0 || e >= experts_)
    throw Error("path profile: trace", "expert id " + std::to_string(e) + " is outside [0, " +
                                           std::to_string(experts_) + ")");
  return e;
}

void PathProfile::check_shape(const place::RoutingTrace& trace,
                              const std::vector<place::LayerRouting>& layers) const {
  const place::LayerRouting& first = trace.iterations.front().front();
  bool ok = static_cast<int>(layers.size()) == layers_;
  for (const auto& r : layers)
    ok =
        ok && r.samples() == first.samples() && r.tokens() == first.tokens() && r.top_k() == top_k_;
  if (!ok)
    throw Error("path profile: trace",
                "every iteration must have the same layers, samples, tokens and top_k");
}

size_t PathProfile::PathHash::operator()(const std::vector<int32_t>& path) const {
  uint64_t h = 1469598103934665603ull;  // FNV-1a over the ids
  for (int32_t e : path) h = (h ^ static_cast<uint32_t>(e)) * 1099511628211ull;
  return static_cast<size_t>(h);
}

PathProfile::PathProfile(const place::RoutingTrace& trace, int path_length, int64_t min_tokens)
    : experts_(trace.experts),
      top_k_(trace.top_k),
      layers_(trace.layers()),
      path_length_(path_length) {
  const std::string where = "path profile";
  if (layers_ < 2)
    throw Error(where,
                "the trace has " + std::to_string(layers_) + " layers; profiling needs at least 2");
  if (path_length < 1 || path_length > layers_ - 1)
    throw Error(where + ": path_length",
                "must be in [1, layers - 1 = " + std::to_string(layers_ - 1) + "], got " +
                    std::to_string(path_length));
  if (min_tokens < 1)
    throw Error(where + ": min_tokens", "must be at least 1, got " + std::to_string(min_tokens));
  if (experts_ < 1 || top_k_ < 1) throw Error(where, "the trace has no experts or top_k < 1");

  using CountTable = std::unordered_map<std::vector<int32_t>, PathCounts, PathHash>;
  std::vector<std::vector<CountTable>> counts(layers_ - 1);
  for (int i = 0; i + 1 < layers_; ++i) counts[i].resize(std::min(path_length, i + 1));
  std::vector<std::vector<int64_t>> layer_counts(layers_, std::vector<int64_t>(experts_, 0));
  std::vector<int64_t> layer_slots(layers_, 0);

  std::vector<int32_t> first(layers_), key;
  for (const auto& layers : trace.iterations) {
    check_shape(trace, layers);
    const place::LayerRouting& shape = layers.at(0);
    for (int s = 0; s < shape.samples(); ++s) {
      for (int t = 0; t < shape.tokens(); ++t) {
        for (int i = 0; i < layers_; ++i) {
          first[i] = layers[i].at(s, t, 0);
          for (int k = 0; k < top_k_; ++k) ++layer_counts[i][checked_id(layers[i].at(s, t, k))];
          layer_slots[i] += top_k_;
        }
        for (int i = 0; i + 1 < layers_; ++i) {
          for (int m = 1; m <= static_cast<int>(counts[i].size()); ++m) {
            key.assign(first.begin() + (i - m + 1), first.begin() + (i + 1));
            auto it = counts[i][m - 1].find(key);
            if (it == counts[i][m - 1].end())
              it = counts[i][m - 1].emplace(key, PathCounts{}).first;
            ++it->second.tokens;
            for (int k = 0; k < top_k_; ++k) it->second.add(layers[i + 1].at(s, t, k));
          }
        }
      }
    }
  }

  tables_.resize(layers_ - 1);
  for (int i = 0; i + 1 < layers_; ++i) {
    for (auto& table : counts[i]) {
      Table& out = tables_[i].emplace_back();
      for (auto& [path, c] : table) {
        if (c.tokens < min_tokens) continue;  // too rare to trust: fall back to a suffix
        out.emplace(path, to_distribution(std::move(c.next), c.tokens * top_k_));
      }
      table.clear();
    }
  }
  for (int i = 0; i < layers_; ++i) {
    std::vector<std::pair<int32_t, int64_t>> c;
    for (int e = 0; e < experts_; ++e)
      if (layer_counts[i][e] > 0) c.emplace_back(e, layer_counts[i][e]);
    marginals_.push_back(to_distribution(std::move(c), std::max<int64_t>(layer_slots[i], 1)));
  }
}

PathProfile::Lookup PathProfile::lookup(int layer, std::span<const int32_t> path) const {
  const std::string where = "path profile lookup";
  if (layer < 0 || layer > layers_ - 2)
    throw Error(where + ": layer", "must be in [0, " + std::to_string(layers_ - 2) +
                                       "] (the next layer must exist), got " +
                                       std::to_string(layer));
  const int n = static_cast<int>(path.size());
  if (n < 1 || n > path_length_ || n > layer + 1)
    throw Error(where + ": path", "has " + std::to_string(n) + " experts; must be 1 to " +
                                      std::to_string(std::min(path_length_, layer + 1)) +
                                      " at layer " + std::to_string(layer));
  for (int32_t e : path)
    if (e < 0 || e >= experts_)
      throw Error(where + ": path", "expert id " + std::to_string(e) + " is outside [0, " +
                                        std::to_string(experts_) + ")");
  std::vector<int32_t> key;
  for (int m = n; m >= 1; --m) {  // Sec. 5.2 groups by the full path; shorter ones back it up
    key.assign(path.end() - m, path.end());
    const Table& table = tables_[layer][m - 1];
    if (auto it = table.find(key); it != table.end()) return {&it->second, m};
  }
  return {&marginals_[layer + 1], 0};
}

const Distribution& PathProfile::marginal(int layer) const {
  if (layer < 0 || layer >= layers_)
    throw Error("path profile: marginal: layer", "must be in [0, " + std::to_string(layers_ - 1) +
                                                     "], got " + std::to_string(layer));
  return marginals_[layer];
}

}  // namespace moecomm::infer
