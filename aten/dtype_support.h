// The dtypes CPU's kernels refuse that PyTorch's meta kernels let through (abs of bool, sign of
// complex, ...): tpu raises CPU's error for them instead of computing something CPU never would.
#pragma once

#include <ATen/core/ivalue.h>

#include <string>
#include <vector>

namespace torchtpu::aten {

// `op` is the schema name with its overload ("aten::clamp_min", "Tensor"); args as the op got them.
void check_cpu_dtype_support(const std::string& op, const std::string& overload,
                             const std::vector<c10::IValue>& args);

}  // namespace torchtpu::aten
