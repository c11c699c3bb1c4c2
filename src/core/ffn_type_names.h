#pragma once
// The expert FFN's one name everywhere: "gelu" (GPT's FFN) or "swiglu" (Mixtral's), as model
// files' ffn_type, `moecomm train --ffn-type` and moecomm.torch's ffn_type= spell it.
#include <string>
#include <string_view>

#include "core/model_config.h"

namespace moecomm::core {

std::string_view to_string(FfnType t);
// Throws Error at `where` for any other name, with a "did you mean" for a near miss.
FfnType parse_ffn_type(std::string_view name, const std::string& where);

}  // namespace moecomm::core
