#pragma once
// Routing traces: the gate's choices route[i][t][k] (NetMoE Eq. 2) for every layer of
// several training iterations, read from and written to a versioned JSON file:
//
//   {"format": "moecomm-routing-trace", "version": 1, "experts": E, "top_k": K,
//    "iterations": [ [ layer0, layer1, ... ], ... ]}
//
// where a layer is [[ [e, e], [e, e], ... one entry per token ], ... one entry per sample ].
// Every layer of every iteration has the same samples and tokens; every token lists exactly
// K distinct ids in [0, E).
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "place/routing.h"

namespace moecomm::place {

inline constexpr int kMaxExperts = 1'000'000;
// Guards allocation against absurd shapes: 2^31 ids are already 8 GiB.
inline constexpr int64_t kMaxTraceIds = int64_t{1} << 31;

struct RoutingTrace {
  int experts = 0;
  int top_k = 0;
  std::vector<std::vector<LayerRouting>> iterations;  // [iteration][layer]

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
