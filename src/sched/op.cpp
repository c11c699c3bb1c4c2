#include "sched/op.h"

#include <functional>

#include "sched/a2a_routing.h"

namespace moecomm::sched {

std::string_view to_string(OpKind kind) {
  switch (kind) {
    case OpKind::kCompute:
      return "compute";
    case OpKind::kCopy:
      return "copy";
    case OpKind::kSend:
      return "send";
    case OpKind::kRecv:
      return "recv";
    case OpKind::kAllToAll:
      return "all_to_all";
    case OpKind::kAllGather:
      return "all_gather";
    case OpKind::kReduceScatter:
      return "reduce_scatter";
    case OpKind::kAllReduce:
      return "all_reduce";
    case OpKind::kBroadcast:
      return "broadcast";
  }
  return "?";
}

std::string_view to_string(Algorithm algorithm) {
  for (const A2AAlgorithmInfo& a : a2a_algorithms()) {
    if (a.algorithm == algorithm) return a.name;
  }
  switch (algorithm) {
    case Algorithm::kDefault:
      return "default";
    case Algorithm::kRing:
      return "ring";
    default:
      return "?";
  }
}

std::string_view to_string(Phase phase) {
  switch (phase) {
    case Phase::kNone:
      return "none";
    case Phase::kForward:
      return "forward";
    case Phase::kBackward:
      return "backward";
  }
  return "?";
}

bool is_collective(OpKind kind) {
  return kind >= OpKind::kAllToAll;
}

bool algorithm_applies(OpKind kind, Algorithm algorithm) {
  if (kind == OpKind::kAllToAll) return is_a2a_algorithm(algorithm);  // the a2a knob
  if (is_collective(kind)) return algorithm == Algorithm::kRing;
  return algorithm == Algorithm::kDefault;  // not a collective: nothing to choose
}

std::string to_string(const Label& label) {
  std::string extra;
  auto add = [&](const std::string& part) { extra += (extra.empty() ? "" : ", ") + part; };
  if (label.layer >= 0) add("layer " + std::to_string(label.layer));
  if (label.phase != Phase::kNone) add(std::string(to_string(label.phase)));
  if (label.chunk >= 0) add("chunk " + std::to_string(label.chunk));
  if (!label.knob.empty()) add("knob " + label.knob);
  if (label.micro_batch >= 0) add("micro-batch " + std::to_string(label.micro_batch));
  const std::string name(label.name());
  return extra.empty() ? name : name + " [" + extra + "]";
}

size_t LabelHash::operator()(const Label& l) const {
  size_t h = size_t(l.role);
  for (size_t part :
       {std::hash<std::string>{}(l.knob), size_t(l.layer), size_t(l.phase), size_t(l.chunk),
        size_t(l.micro_batch)})
    h = h * 1000003u ^ part;
  return h;
}

}  // namespace moecomm::sched
