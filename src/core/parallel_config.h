#pragma once
// Parallel sizes, folded as in Megatron-Core (DESIGN.md): the dense part uses
// tp x cp x dp x pp = world, the MoE part esp x ep x edp x pp = world with edp derived.
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace moecomm::core {

// Each size is at most this, so products of sizes fit in 64 bits.
inline constexpr int kMaxParallelSize = 1'000'000;

// Where context-parallel groups sit against expert-parallel ones (MoNTA "Cluster Expansion",
// Fig. 12). Vertical: CP and EP aligned in one dimension (Megatron-Core's fold: cp varies next
// after tp, as ep after esp), the network spans max(ep, cp) groups. Horizontal: CP orthogonal
// to EP (cp varies after the whole EP group), the network spans ep x cp.
enum class CpLayout { kVertical, kHorizontal };

// What a user wrote: any size may be left out and is then derived (see resolve()).
struct ParallelSpec {
  std::optional<int> dp, tp, ep, esp, pp, cp;
  std::optional<CpLayout> cp_layout = {};
};

struct ParallelConfig {
  int dp = 1, tp = 1, ep = 1, esp = 1, pp = 1, cp = 1;
  int edp = 1;  // derived: world / (esp * ep * pp)
  CpLayout cp_layout = CpLayout::kVertical;

  int world() const { return tp * cp * dp * pp; }
  nlohmann::json to_json() const;
};

std::string_view to_string(CpLayout layout);

// "dp=2,tp=8,ep=2" (and cp_layout=vertical|horizontal); `where` names the source (e.g.
// "--parallel"). Throws Error naming the key on unknown keys (with the near-miss one),
// repeated keys, non-integers or values < 1, and on empty items ("tp=2,,ep=4", ",").
ParallelSpec parse_parallel_spec(const std::string& text, const std::string& where);
ParallelSpec parse_parallel_json(const nlohmann::json& obj, const std::string& where);

// Fills the sizes left out (tp, cp, pp = 1; esp = tp; dp = world / (tp cp pp);
// ep = the largest divisor of the experts that fits world / (esp pp)) and checks that the
// sizes fold the world and divide the experts; cp_layout defaults to vertical, and
// horizontal needs tp to divide esp x ep and the quotient (the TP groups an EP group spans)
// to divide dp. Throws Error naming `where` and the key.
// cp_layout=horizontal folds only where tp divides esp x ep and the quotient divides dp;
// throws Error naming `where` otherwise (vertical always folds).
void check_cp_layout(const ParallelConfig& config, const std::string& where);

ParallelConfig resolve_parallel(const ParallelSpec& spec, int world, int experts,
                                const std::string& where);

}  // namespace moecomm::core
