#pragma once
// The data type compute runs in: devices state a peak rate per type (an A100 does 19.5
// fp32 TFLOPS on its CUDA cores and 312 bf16 on its tensor cores), models the type their
// GEMMs use.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace moecomm::core {

// tf32: fp32 storage, GEMMs on the tensor cores with a 10-bit mantissa (PyTorch's default
// for fp32 matmuls on Ampere before 1.12).
enum class Dtype { kFp64, kFp32, kTf32, kBf16, kFp16, kFp8 };

const std::vector<Dtype>& all_dtypes();
std::string_view to_string(Dtype dtype);
// Throws moecomm::Error naming `where` and listing the names on an unknown one.
Dtype parse_dtype(const std::string& name, const std::string& where);
// The compute type a model's storage size implies when the model does not say: 8 fp64,
// 4 fp32, 2 bf16, 1 fp8.
Dtype default_compute_dtype(int64_t dtype_bytes);

}  // namespace moecomm::core
