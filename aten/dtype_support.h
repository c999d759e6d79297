// The dtypes CPU's kernels refuse that PyTorch's meta kernels let through (abs of bool, sign of
// complex, ...: each op's record lists them), and the Scalars they refuse to convert (300 to
// int8): tpu raises CPU's error for them instead of computing something CPU never would.
#pragma once

#include <ATen/core/function_schema.h>
#include <ATen/core/ivalue.h>
#include <torch/version.h>

#include <string>
#include <vector>

namespace torchtpu::aten {

// The dtypes a refusal is about. kComplexHalf, kFloat8: the op's result type (all its tensor and
// Scalar arguments promoted) is complex32, or a float8 type.
enum class Refused { kBool, kComplex, kInteger, kComplexHalf, kFloat8, kFloating, kNotInteger, kHalfFloat };

// A dtype CPU's kernel refuses that PyTorch's meta kernel lets through, judged on self's dtype
// unless it says otherwise: part of the op's record, declared with refuse_on_cpu (aten/lowering.h)
// in the op's family file.
struct CpuRefusal {
  Refused kind;
  // CPU's dispatch name ("abs_cpu": NotImplementedError "abs_cpu" not implemented for 'Bool'), or
  // with `message` set, that message (a NotImplementedError unless `runtime_error`).
  const char* kernel;
  const char* message = nullptr;
  bool runtime_error = false;
  const char* overload = nullptr;  // only this overload ("" for clamp_min's Scalar one)
  bool scalars_promote = false;    // judged on the dtype the Scalar arguments promote self to
  bool all_promote = false;        // judged on the dtype all arguments promote to (the shifts')
  bool type_error = false;         // `message` is a TypeError
};

// A refusal judged on the dtype all arguments promote to (atan2 of a float and a complex tensor).
constexpr CpuRefusal refused_promoted(Refused kind, const char* kernel, const char* runtime_error_message = nullptr) {
  return {kind, kernel, runtime_error_message, runtime_error_message != nullptr, nullptr, false, true};
}

// PyTorch 2.15 raises TypeError for maximum's (minimum's, fmax's, fmin's) complex tensors and
// NotImplementedError for heaviside's, where earlier versions raised RuntimeError.
constexpr bool kTorch215 = TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 15);
constexpr CpuRefusal refused_type_error(const char* message) {
  CpuRefusal r = refused_promoted(Refused::kComplex, nullptr, message);
  r.runtime_error = !kTorch215;
  r.type_error = kTorch215;
  return r;
}
constexpr CpuRefusal refused_not_implemented(const char* message) {
  CpuRefusal r = refused_promoted(Refused::kComplex, nullptr, message);
  r.runtime_error = !kTorch215;
  return r;
}

// Raises CPU's error where `refusals` (the op's record's) or one of a few argument checks CPU's
// kernels make refuse the call. `op` is the schema name with its overload ("aten::clamp_min",
// "Tensor"); args as the op got them.
void check_cpu_dtype_support(const std::string& op, const std::string& overload,
                             const std::vector<CpuRefusal>& refusals, const std::vector<c10::IValue>& args);

// The Scalar arguments CPU's kernel converts to its compute dtype with an overflow check
// (`int8.masked_fill(m, 300)`: "value cannot be converted to type int8_t without overflow") where
// tpu would wrap. Decided from the schema once, when the op's kernel is installed.
struct ScalarRangeChecks {
  // The dtype the Scalars convert to: self's, or the one all arguments promote to (clamp).
  enum class Target { kSelf, kPromoted };
  // Which of those dtypes are checked: all, or integers and 16-bit floats (CPU takes the Scalar
  // as a double for the others), or all but with 16-bit floats checked as float (CPU's opmath).
  enum class Checked { kAll, kIntegralAndHalf, kOpmath };
  std::vector<size_t> args;  // positions of the checked Scalars
  Target target = Target::kSelf;
  Checked checked = Checked::kAll;
  bool integer_powers = false;  // pow: integers to negative integer powers are refused
  // clamp's and hardtanh's bounds for an integral compute dtype: judged by the linked torch's own
  // CPU kernel (PyTorch 2.15 clips integer bounds to the dtype's range and raises only for a min
  // above it or a max below it; earlier versions raised any Scalar conversion's overflow error).
  enum class Probe { kNone, kClamp, kClampMin, kClampMax, kHardtanh };
  Probe probe = Probe::kNone;
};
ScalarRangeChecks scalar_range_checks(const c10::FunctionSchema& schema);
void check_scalar_ranges(const ScalarRangeChecks& checks, const std::vector<c10::IValue>& args);
// Whether the linked torch's CPU clamp clips an integer Scalar bound to the dtype's range (2.15:
// uint8 clamp(min=-1) clamps nothing) rather than wrapping it (earlier versions: min=255).
bool clamp_clips_integer_bounds();
// CPU's overflow check of a Scalar converted to `dtype` (fill_(300) on int8 raises).
void check_scalar_fits(const c10::Scalar& value, c10::ScalarType dtype);

}  // namespace torchtpu::aten
