#include "place/synthetic_routing.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <sstream>
#include <utility>

#include "core/error.h"
#include "core/model_config.h"

namespace moecomm::place {

namespace {

std::string shown(double x) {
  std::ostringstream out;
  out << x;
  return out.str();
}

void require(bool ok, const char* field, const std::string& rule, const std::string& got) {
  if (!ok) throw Error(std::string("synthetic routing: ") + field, rule + ", got " + got);
}

void require_positive(int x, const char* field) {
  require(x >= 1, field, "must be positive", std::to_string(x));
}

void require_int(int x, const char* field, int max, const std::string& max_name) {
  require(x >= 1 && x <= max, field, "must be in [1, " + max_name + "]", std::to_string(x));
}

void require_unit(double x, const char* field, double max) {
  require(x >= 0 && x <= max, field, "must be in [0, " + shown(max) + "]", shown(x));
}

}  // namespace

void validate(const SyntheticRoutingSpec& spec) {
  require_positive(spec.samples, "samples");
  require_positive(spec.tokens, "tokens");
  require_positive(spec.layers, "layers");
  require_positive(spec.iterations, "iterations");
  require_int(spec.experts, "experts", kMaxExperts, std::to_string(kMaxExperts));
  const std::string experts = "experts = " + std::to_string(spec.experts);
  require_int(spec.top_k, "top_k", spec.experts, experts);
  require_int(spec.preferred, "preferred", spec.experts, experts);
  require_unit(spec.locality, "locality", 1);
  require_unit(spec.layer_correlation, "layer_correlation", 1);
  require_unit(spec.skew, "skew", 10);  // 10 already puts ~all mass on one expert
  if (const auto problem = core::router_groups_problem(spec.experts, spec.top_k, spec.router_groups,
                                                       spec.router_group_top_k))
    throw Error("synthetic routing: " + problem->key, problem->message);
  const double ids =
      static_cast<double>(spec.iterations) * spec.layers * spec.samples * spec.tokens * spec.top_k;
  if (ids > static_cast<double>(kMaxTraceIds))
    throw Error("synthetic routing",
                "too large: iterations x layers x samples x tokens x top_k = " + shown(ids) +
                    " expert ids, at most " + std::to_string(kMaxTraceIds));
}

namespace {

// Platform-independent draws from mt19937_64 (std:: distributions are not).
class Rng {
 public:
  explicit Rng(uint64_t seed) : gen_(seed) {}
  double unit() { return static_cast<double>(gen_() >> 11) * 0x1.0p-53; }  // [0, 1)
  int below(int n) { return std::min(static_cast<int>(unit() * n), n - 1); }
  void shuffle(std::vector<int32_t>& v) {
    for (size_t i = v.size(); i > 1; --i) std::swap(v[i - 1], v[below(static_cast<int>(i))]);
  }

 private:
  std::mt19937_64 gen_;
};

// Zipf weights by popularity rank; the same for every layer, only the rank order differs.
struct Zipf {
  std::vector<double> weight;  // 1 / (r + 1)^skew
  std::vector<double> cdf;     // sum of weight[0..r]
  std::vector<double> tail;    // sum of weight[r..], tail[n] = 0: accurate for rare ranks
  std::vector<int32_t> guide;  // guide[j]: first r with cdf[r] > total * j / n

  Zipf(int n, double skew) : weight(n), cdf(n), tail(n + 1, 0.0), guide(n) {
    for (int r = 0; r < n; ++r) weight[r] = std::pow(r + 1.0, -skew);
    double sum = 0;
    for (int r = 0; r < n; ++r) cdf[r] = sum += weight[r];
    for (int r = n - 1; r >= 0; --r) tail[r] = tail[r + 1] + weight[r];
    for (int j = 0, r = 0; j < n; ++j) {
      while (r < n - 1 && cdf[r] <= sum * j / n) ++r;
      guide[j] = r;
    }
  }
  int size() const { return static_cast<int>(weight.size()); }

  // Inverse CDF: the first r with cdf[r] > u * total. The guide table only picks where the
  // search starts (O(1) expected steps); both walks make the answer exact whatever it says.
  int sample(double u) const {
    const int n = size();
    const double x = u * cdf.back();
    int r = guide[std::min(static_cast<int>(u * n), n - 1)];
    while (r > 0 && cdf[r - 1] > x) --r;
    while (r < n - 1 && cdf[r] <= x) ++r;
    return r;
  }

  // The same restricted to ranks >= p: the first r >= p with tail[r + 1] < (1 - u) tail[p]
  // (suffix sums keep rare ranks' weights that a prefix sum near the total would round off).
  int sample_from(int p, double u) const {
    const double target = (1 - u) * tail[p];
    int lo = p, hi = size() - 1;
    while (lo < hi) {
      const int mid = lo + (hi - lo) / 2;
      if (tail[mid + 1] < target)
        hi = mid;
      else
        lo = mid + 1;
    }
    return lo;
  }
};

// Successive draws of distinct ranks from a Zipf table, each renormalized over the ranks
// not yet taken, by rejection. While taken ranks hold under half the mass the proposal is
// the whole table; past that it is the ranks from the first untaken one on: that rank
// outweighs every taken rank above it, so a proposal is accepted with probability at least
// 1 / (1 + taken ranks), and no draw ever loops long. Taken ranks are stamped, not stored,
// so nothing is allocated per token.
class DistinctRanks {
 public:
  DistinctRanks(const Zipf& zipf, Rng& rng) : zipf_(zipf), rng_(rng), stamp_(zipf.size(), 0) {}

  void clear() {
    ++current_;
    first_untaken_ = 0;
    taken_mass_ = 0;
  }
  bool taken(int r) const { return stamp_[r] == current_; }
  void take(int r) {
    stamp_[r] = current_;
    taken_mass_ += zipf_.weight[r];
    while (first_untaken_ < zipf_.size() && taken(first_untaken_)) ++first_untaken_;
  }
  int draw() {
    for (;;)
      if (const int r = propose(); !taken(r)) {
        take(r);
        return r;
      }
  }
  // The same renormalized over the untaken ranks `allowed` accepts too, by up to `tries`
  // proposals; -1 when none is accepted (the caller then draws exactly over its few allowed
  // ranks). Accepted proposals follow the renormalized weights whatever `allowed` is.
  template <class Allowed>
  int try_draw(Allowed allowed, int tries) {
    for (int i = 0; i < tries; ++i)
      if (const int r = propose(); !taken(r) && allowed(r)) {
        take(r);
        return r;
      }
    return -1;
  }

 private:
  int propose() {
    const double u = rng_.unit();
    return taken_mass_ <= 0.5 * zipf_.cdf.back() ? zipf_.sample(u)
                                                 : zipf_.sample_from(first_untaken_, u);
  }

  const Zipf& zipf_;
  Rng& rng_;
  std::vector<uint64_t> stamp_;
  uint64_t current_ = 0;
  int first_untaken_ = 0;
  double taken_mass_ = 0;
};

// rank_l (as its inverse) and pi_l of the model, fixed for all iterations.
struct LayerModel {
  std::vector<int32_t> expert_of_rank;
  std::vector<int32_t> rank_of_expert;
  std::vector<int32_t> next;  // pi_l; empty for the last layer
};

std::vector<int32_t> identity(int n) {
  std::vector<int32_t> v(n);
  for (int i = 0; i < n; ++i) v[i] = i;
  return v;
}

class Generator {
 public:
  explicit Generator(const SyntheticRoutingSpec& spec)
      : spec_(spec),
        rng_(spec.seed),
        zipf_(spec.experts, spec.skew),
        ranks_(zipf_, rng_),
        preferred_(static_cast<size_t>(spec.samples) * spec.preferred),
        limited_(core::limits_groups(spec.router_groups, spec.router_group_top_k)),
        per_group_(spec.experts / spec.router_groups),
        group_stamp_(static_cast<size_t>(spec.router_groups), 0) {
    for (int l = 0; l < spec.layers; ++l) {
      LayerModel& m = model_.emplace_back();
      m.expert_of_rank = identity(spec.experts);
      rng_.shuffle(m.expert_of_rank);
      m.rank_of_expert.resize(spec.experts);
      for (int r = 0; r < spec.experts; ++r) m.rank_of_expert[m.expert_of_rank[r]] = r;
      if (l + 1 < spec.layers) rng_.shuffle(m.next = identity(spec.experts));
    }
  }

  std::vector<LayerRouting> iteration() {
    std::vector<LayerRouting> layers;
    for (int l = 0; l < spec_.layers; ++l) {
      LayerRouting& routing = layers.emplace_back(spec_.samples, spec_.tokens, spec_.top_k);
      for (int i = 0; i < spec_.samples; ++i) {
        int32_t* pref = &preferred_[static_cast<size_t>(i) * spec_.preferred];
        update_preferred(l, pref);
        for (int t = 0; t < spec_.tokens; ++t) {
          int32_t* out = &routing.at(i, t, 0);
          if (limited_)
            route_token_limited(l, pref, out);
          else
            route_token(l, pref, out);
        }
      }
    }
    return layers;
  }

 private:
  void update_preferred(int l, int32_t* pref) {
    if (l > 0 && rng_.unit() < spec_.layer_correlation) {
      for (int j = 0; j < spec_.preferred; ++j) pref[j] = model_[l - 1].next[pref[j]];
      return;
    }
    ranks_.clear();
    for (int j = 0; j < spec_.preferred; ++j) pref[j] = model_[l].expert_of_rank[ranks_.draw()];
  }

  // One token's route[i][t][0..top_k) (NetMoE Eq. 2) at layer l, written to out.
  void route_token(int l, const int32_t* pref, int32_t* out) {
    const LayerModel& m = model_[l];
    const int k_max = spec_.top_k, p = spec_.preferred;
    ranks_.clear();
    int k = 0;
    if (rng_.unit() < spec_.locality) {
      if (p > k_max) {
        pick_preferred(m, pref, out);
        return;
      }
      for (; k < p; ++k) out[k] = pref[k];  // the whole set, filled up from p_l below
      if (p < k_max)
        for (int j = 0; j < p; ++j) ranks_.take(m.rank_of_expert[pref[j]]);
    }
    for (; k < k_max; ++k) out[k] = m.expert_of_rank[ranks_.draw()];
  }

  // Floyd's algorithm: top_k distinct uniform picks out of preferred > top_k experts.
  void pick_preferred(const LayerModel& m, const int32_t* pref, int32_t* out) {
    const int k_max = spec_.top_k, p = spec_.preferred;
    for (int j = p - k_max, k = 0; j < p; ++j, ++k) {
      int32_t e = pref[rng_.below(j + 1)];
      if (ranks_.taken(m.rank_of_expert[e])) e = pref[j];
      ranks_.take(m.rank_of_expert[e]);
      out[k] = e;
    }
  }

  // route_token within router_group_top_k groups (the header's rule).
  void route_token_limited(int l, const int32_t* pref, int32_t* out) {
    const LayerModel& m = model_[l];
    const int k_max = spec_.top_k, p = spec_.preferred;
    ranks_.clear();
    ++token_;
    used_.clear();
    int k = 0;
    // Expert e (its rank taken already) into out, its group into the token's.
    const auto add = [&](int32_t e) {
      const int g = e / per_group_;
      if (group_stamp_[g] != token_) {
        group_stamp_[g] = token_;
        used_.push_back(g);
      }
      out[k++] = e;
    };
    const auto take = [&](int32_t e) {
      ranks_.take(m.rank_of_expert[e]);
      add(e);
    };
    if (rng_.unit() < spec_.locality) {
      if (p > k_max) {
        // Uniform picks, one at a time, among the preferred experts still allowed.
        while (k < k_max) {
          candidates_.clear();
          for (int j = 0; j < p; ++j)
            if (!ranks_.taken(m.rank_of_expert[pref[j]]) && allowed(pref[j]))
              candidates_.push_back(pref[j]);
          if (candidates_.empty()) break;
          take(candidates_[rng_.below(static_cast<int>(candidates_.size()))]);
        }
      } else {
        for (int j = 0; j < p; ++j)
          if (allowed(pref[j])) take(pref[j]);
      }
    }
    while (k < k_max) add(m.expert_of_rank[draw_allowed(m)]);
  }

  bool allowed(int32_t e) const {
    return static_cast<int>(used_.size()) < spec_.router_group_top_k ||
           group_stamp_[e / per_group_] == token_;
  }

  // A rank from p_l renormalized over the untaken experts the limit allows: while the token
  // holds fewer than router_group_top_k groups every untaken expert is allowed (draw()); then
  // rejection first, and past kTries an exact draw over its groups' untaken experts.
  int draw_allowed(const LayerModel& m) {
    if (static_cast<int>(used_.size()) < spec_.router_group_top_k) return ranks_.draw();
    constexpr int kTries = 32;
    const int r =
        ranks_.try_draw([&](int rank) { return allowed(m.expert_of_rank[rank]); }, kTries);
    if (r >= 0) return r;
    double total = 0;
    for (int g : used_)
      for (int e = g * per_group_; e < (g + 1) * per_group_; ++e)
        if (!ranks_.taken(m.rank_of_expert[e])) total += zipf_.weight[m.rank_of_expert[e]];
    double x = rng_.unit() * total;
    int last = -1;
    for (int g : used_)
      for (int e = g * per_group_; e < (g + 1) * per_group_; ++e) {
        const int rank = m.rank_of_expert[e];
        if (ranks_.taken(rank)) continue;
        last = rank;
        if ((x -= zipf_.weight[rank]) < 0) {
          ranks_.take(rank);
          return rank;
        }
      }
    ranks_.take(last);  // x rounded past the total: the last allowed expert
    return last;
  }

  const SyntheticRoutingSpec spec_;
  Rng rng_;
  Zipf zipf_;
  DistinctRanks ranks_;
  std::vector<LayerModel> model_;
  std::vector<int32_t> preferred_;  // [sample][j], carried from layer to layer
  // Node-limited routing: whether it limits, experts per group, the groups the current token
  // holds (stamped with its number, and in order), the preferred experts it may still pick.
  bool limited_;
  int per_group_;
  std::vector<uint64_t> group_stamp_;
  uint64_t token_ = 0;
  std::vector<int> used_;
  std::vector<int32_t> candidates_;
};

}  // namespace

RoutingTrace generate_routing_trace(const SyntheticRoutingSpec& spec) {
  validate(spec);
  RoutingTrace trace;
  trace.experts = spec.experts;
  trace.top_k = spec.top_k;
  Generator gen(spec);
  for (int it = 0; it < spec.iterations; ++it) trace.iterations.push_back(gen.iteration());
  return trace;
}

}  // namespace moecomm::place
