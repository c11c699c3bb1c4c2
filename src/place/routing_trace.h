#pragma once
// Routing traces: the gate's choices route[i][t][k] (NetMoE Eq. 2) for every layer of
// several training iterations, read from and written to a versioned JSON file:
//
//   {"format": "moecomm-routing-trace", "version": 2, "experts": E, "top_k": K,
//    "model": {"name": "tiny", "hidden": 64, "ffn_hidden": 128, "ffn_type": "gelu",
//              "dtype_bytes": 4},
//    "layout": {"ranks": 2, "ranks_per_node": 1, "tp": 1},
//    "iterations": [ [ layer0, layer1, ... ], ... ]}
//
// where a layer is [[ [e, e], [e, e], ... one entry per token ], ... one entry per sample ].
// Every layer of every iteration has the same samples and tokens; every token lists exactly
// K distinct ids in [0, E). "model" and "layout" are optional (version 1 files have neither):
// they let `place` and `infer` price and replay the trace as it was recorded without flags.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/model_config.h"
#include "place/routing.h"

namespace moecomm::place {

inline constexpr int kMaxExperts = 1'000'000;
// Guards allocation against absurd shapes: 2^31 ids are already 8 GiB.
inline constexpr int64_t kMaxTraceIds = int64_t{1} << 31;

// The model whose gate chose the routing, as far as the trace's readers need it: the row a
// token carries through the A2A and the expert FFN that computes it.
struct TraceModel {
  std::string name;
  int64_t hidden = 0;
  int64_t ffn_hidden = 0;
  core::FfnType ffn_type = core::FfnType::kGelu;
  int64_t dtype_bytes = 4;  // bytes of one element of a token's row as it travels

  double bytes_per_token() const { return static_cast<double>(hidden) * dtype_bytes; }
};

// The ranks the routing was recorded on. A sample lives on one TP group of tp consecutive
// ranks, so the trace's samples sit on ranks / tp devices, ranks_per_node / tp per node.
struct TraceLayout {
  int ranks = 1;
  int ranks_per_node = 1;
  int tp = 1;
};

struct RoutingTrace {
  int experts = 0;
  int top_k = 0;
  std::optional<TraceModel> model = {};                    // absent in version 1 files
  std::optional<TraceLayout> layout = {};                  // absent in version 1 files
  std::vector<std::vector<LayerRouting>> iterations = {};  // [iteration][layer]

  // Shape of the first layer (0 if there is none); all layers share it.
  int layers() const;
  int samples() const;
  int tokens() const;
};

// Throws Error naming `where` (the file) and the JSON path of the first problem, e.g.
// "trace.json: iterations[0][1][3][17][1]: expert id 70 is outside [0, 64)".
RoutingTrace parse_routing_trace(const nlohmann::json& doc, const std::string& where);
RoutingTrace read_routing_trace(const std::string& path);

// Throws Error if the layers' shapes disagree with each other or with top_k (the file
// would not read back).
nlohmann::json routing_trace_to_json(const RoutingTrace& trace);
void write_routing_trace(const RoutingTrace& trace, const std::string& path);

}  // namespace moecomm::place
