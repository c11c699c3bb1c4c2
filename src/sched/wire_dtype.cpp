#include "sched/wire_dtype.h"

#include <algorithm>

#include "core/error.h"

namespace moecomm::sched {
namespace {

std::string accepted() {
  std::string out;
  for (const std::string& n : a2a_dtype_names()) out += (out.empty() ? "" : ", ") + n;
  return out + ", or DISPATCH/COMBINE such as fp8/bf16";
}

core::Dtype one(const std::string& name, const std::string& where) {
  for (core::Dtype d : a2a_wire_dtypes())
    if (name == core::to_string(d)) return d;
  throw Error(where, "unknown wire dtype \"" + name + "\" (accepted: " + accepted() + ")");
}

}  // namespace

const std::vector<core::Dtype>& a2a_wire_dtypes() {
  static const std::vector<core::Dtype> all = {core::Dtype::kFp32, core::Dtype::kBf16,
                                               core::Dtype::kFp8};
  return all;
}

std::vector<std::string> a2a_dtype_names() {
  std::vector<std::string> out;
  for (core::Dtype d : a2a_wire_dtypes()) out.emplace_back(core::to_string(d));
  return out;
}

A2ADtype parse_a2a_dtype(const std::string& value, const std::string& where) {
  const size_t slash = value.find('/');
  if (slash == std::string::npos) {
    const core::Dtype d = one(value, where);
    return {d, d};
  }
  if (value.find('/', slash + 1) != std::string::npos)
    throw Error(where, "\"" + value + "\": one dtype, or two as DISPATCH/COMBINE (accepted: " +
                           accepted() + ")");
  return {one(value.substr(0, slash), where), one(value.substr(slash + 1), where)};
}

std::string to_string(const A2ADtype& dtype) {
  const std::string dispatch(core::to_string(dtype.dispatch));
  if (dtype.dispatch == dtype.combine) return dispatch;
  return dispatch + "/" + std::string(core::to_string(dtype.combine));
}

double wire_row_bytes(int64_t hidden, core::Dtype dtype) {
  const double h = double(hidden);
  switch (dtype) {
    case core::Dtype::kFp64:
      return 8 * h;
    case core::Dtype::kFp32:
    case core::Dtype::kTf32:  // fp32 storage
      return 4 * h;
    case core::Dtype::kBf16:
    case core::Dtype::kFp16:
      return 2 * h;
    case core::Dtype::kFp8:
      return h + 4.0 * double((hidden + kFp8ScaleBlock - 1) / kFp8ScaleBlock);
  }
  return 4 * h;
}

}  // namespace moecomm::sched
