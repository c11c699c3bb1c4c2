#pragma once
// Parallel sizes, folded as in Megatron-Core (DESIGN.md): the dense part uses
// tp x cp x dp x pp = world, the MoE part esp x ep x edp x pp = world with edp derived.
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace moecomm::core {

// Each size is at most this, so products of sizes fit in 64 bits.
inline constexpr int kMaxParallelSize = 1'000'000;

// What a user wrote: any size may be left out and is then derived (see resolve()).
struct ParallelSpec {
  std::optional<int> dp, tp, ep, esp, pp, cp;
};

struct ParallelConfig {
  int dp = 1, tp = 1, ep = 1, esp = 1, pp = 1, cp = 1;
  int edp = 1;  // derived: world / (esp * ep * pp)

  int world() const { return tp * cp * dp * pp; }
  nlohmann::json to_json() const;
};

// "dp=2,tp=8,ep=2"; `where` names the source (e.g. "--parallel"). Throws Error naming the
// key on unknown keys, non-integers or values < 1.
ParallelSpec parse_parallel_spec(const std::string& text, const std::string& where);
ParallelSpec parse_parallel_json(const nlohmann::json& obj, const std::string& where);

// Fills the sizes left out (tp, cp, pp = 1; esp = tp; dp = world / (tp cp pp);
// ep = the largest divisor of the experts that fits world / (esp pp)) and checks that the
// sizes fold the world and divide the experts. Throws Error naming `where` and the key.
ParallelConfig resolve_parallel(const ParallelSpec& spec, int world, int experts,
                                const std::string& where);

}  // namespace moecomm::core
