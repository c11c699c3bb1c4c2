#include "core/dtype.h"

#include "core/error.h"

namespace moecomm::core {

const std::vector<Dtype>& all_dtypes() {
  static const std::vector<Dtype> all = {Dtype::kFp64, Dtype::kFp32, Dtype::kTf32,
                                         Dtype::kBf16, Dtype::kFp16, Dtype::kFp8};
  return all;
}

std::string_view to_string(Dtype dtype) {
  switch (dtype) {
    case Dtype::kFp64:
      return "fp64";
    case Dtype::kFp32:
      return "fp32";
    case Dtype::kTf32:
      return "tf32";
    case Dtype::kBf16:
      return "bf16";
    case Dtype::kFp16:
      return "fp16";
    case Dtype::kFp8:
      return "fp8";
  }
  return "?";
}

Dtype parse_dtype(const std::string& name, const std::string& where) {
  std::string names;
  for (Dtype d : all_dtypes()) {
    if (name == to_string(d)) return d;
    names += (names.empty() ? "" : ", ") + std::string(to_string(d));
  }
  throw Error(where, "unknown data type \"" + name + "\" (known: " + names + ")");
}

Dtype default_compute_dtype(int64_t dtype_bytes) {
  switch (dtype_bytes) {
    case 8:
      return Dtype::kFp64;
    case 4:
      return Dtype::kFp32;
    case 1:
      return Dtype::kFp8;
    default:
      return Dtype::kBf16;
  }
}

}  // namespace moecomm::core
