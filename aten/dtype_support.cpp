#include "aten/dtype_support.h"

#include <ATen/native/TypeProperties.h>
#include <ATen/ops/clamp.h>
#include <ATen/ops/clamp_max.h>
#include <ATen/ops/clamp_min.h>
#include <ATen/ops/hardtanh.h>
#include <ATen/ops/result_type.h>
#include <ATen/ops/zeros.h>
#include <c10/util/Exception.h>
#include <torch/version.h>

#include <algorithm>
#include <optional>
#include <unordered_map>

namespace torchtpu::aten {
namespace {

// kComplexHalf, kFloat8: the op's result type (all its tensor and Scalar arguments promoted) is
// complex32, or a float8 type.
enum class Kind { kBool, kComplex, kInteger, kComplexHalf, kFloat8, kFloating, kNotInteger, kHalfFloat };

// Refusals of these kinds are judged on the type all arguments promote to, before any other.
bool on_result_type(Kind kind) { return kind == Kind::kComplexHalf || kind == Kind::kFloat8; }

struct Refusal {
  Kind kind;
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
constexpr Refusal promoted(Kind kind, const char* kernel, const char* runtime_error_message = nullptr) {
  return {kind, kernel, runtime_error_message, runtime_error_message != nullptr, nullptr, false, true};
}

// PyTorch 2.15 raises TypeError for maximum's (minimum's, fmax's, fmin's) complex tensors and
// NotImplementedError for heaviside's, where earlier versions raised RuntimeError.
constexpr bool kTorch215 = TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 15);
constexpr Refusal promoted_type_error(const char* message) {
  Refusal r = promoted(Kind::kComplex, nullptr, message);
  r.runtime_error = !kTorch215;
  r.type_error = kTorch215;
  return r;
}
constexpr Refusal promoted_not_implemented(const char* message) {
  Refusal r = promoted(Kind::kComplex, nullptr, message);
  r.runtime_error = !kTorch215;
  return r;
}

// By the op's name without the in-place underscore; measured against CPU PyTorch 2.11.
const std::unordered_multimap<std::string, Refusal>& refusals() {
  static const std::unordered_multimap<std::string, Refusal> table = {
      {"abs", {Kind::kBool, "abs_cpu"}},
      {"ceil", {Kind::kBool, "ceil_vml_cpu"}},
      {"ceil", {Kind::kComplex, nullptr, "ceil is not supported for complex inputs"}},
      {"floor", {Kind::kBool, "floor_vml_cpu"}},
      {"floor", {Kind::kComplex, nullptr, "floor is not supported for complex inputs"}},
      {"trunc", {Kind::kBool, "trunc_vml_cpu"}},
      {"trunc", {Kind::kComplex, nullptr, "trunc is not supported for complex inputs"}},
      {"round", {Kind::kBool, "round_vml_cpu"}},
      {"round", {Kind::kComplex, "round_vml_cpu"}},
      {"frac", {Kind::kBool, "frac_cpu"}},
      {"frac", {Kind::kInteger, "frac_cpu"}},
      {"frac", {Kind::kComplex, "frac_cpu"}},
      {"sign", {Kind::kComplex, nullptr,
                "Unlike NumPy, torch.sign is not intended to support complex numbers. Please use torch.sgn instead."}},
      {"erf", {Kind::kComplex, "erf_vml_cpu"}},
      {"erfc", {Kind::kComplex, "erfc_vml_cpu"}},
      {"lgamma", {Kind::kComplex, "lgamma_vml_cpu"}},
      {"maximum", promoted_type_error("maximum not implemented for complex tensors.")},
      {"minimum", promoted_type_error("minimum not implemented for complex tensors.")},
      {"fmax", promoted_type_error("fmax not implemented for complex tensors.")},
      {"fmin", promoted_type_error("fmin not implemented for complex tensors.")},
      {"clamp", {Kind::kBool, "clamp_scalar_cpu", nullptr, false, "", true}},
      {"clamp_min", {Kind::kBool, "clamp_min_scalar_cpu", nullptr, false, "", true}},
      {"clamp_max", {Kind::kBool, "clamp_max_scalar_cpu", nullptr, false, "", true}},
      {"addcmul", {Kind::kBool, "addcmul_cpu_out"}},
      {"logaddexp2", {Kind::kComplex, "logaddexp2_cpu"}},
      // Judged on the dtype the arguments promote to: bools ** 2.0 computes in float, hypot of an
      // int8 and an int64 tensor is refused in int64.
      {"pow", {Kind::kBool, "pow", nullptr, false, "Tensor_Tensor", false, true}},
      {"atan2", promoted(Kind::kComplex, "atan2_cpu")},
      {"xlogy", promoted(Kind::kComplex, "xlogy_cpu")},
      {"hypot", promoted(Kind::kBool, "hypot_cpu")},
      {"hypot", promoted(Kind::kInteger, "hypot_cpu")},
      {"hypot", promoted(Kind::kComplex, "hypot_cpu")},
      {"nextafter", promoted(Kind::kInteger, "nextafter_cpu")},
      // XLA's CPU compiler crashes on a complex remainder: CPU refuses it, as the others here.
      {"remainder", promoted(Kind::kComplex, "remainder_cpu")},
      {"fmod", promoted(Kind::kComplex, "fmod_cpu")},
      {"copysign", promoted(Kind::kComplex, "copysign_cpu")},
      {"gcd", promoted(Kind::kComplex, "gcd_cpu")},
      {"lcm", promoted(Kind::kComplex, "lcm_cpu")},
      {"special_xlog1py", promoted(Kind::kComplex, "xlog1py_cpu")},
      {"heaviside", promoted_not_implemented("heaviside is not yet implemented for complex tensors.")},
      {"lt", promoted(Kind::kComplex, "lt_cpu")},
      {"le", promoted(Kind::kComplex, "le_cpu")},
      {"gt", promoted(Kind::kComplex, "gt_cpu")},
      {"ge", promoted(Kind::kComplex, "ge_cpu")},
      {"max", {Kind::kComplex, "max_all", nullptr, false, ""}},
      {"min", {Kind::kComplex, "min_all", nullptr, false, ""}},
      {"clamp_min", {Kind::kComplex, "maximum_cpu", nullptr, false, "Tensor"}},
      {"clamp_max", {Kind::kComplex, "minimum_cpu", nullptr, false, "Tensor"}},
      // Shifts compute in the promoted dtype: bools << 1 is int64, bools << bools is refused.
      {"__lshift__", promoted(Kind::kNotInteger, "lshift_cpu")},
      {"__ilshift__", promoted(Kind::kNotInteger, "lshift_cpu")},
      {"bitwise_left_shift", promoted(Kind::kNotInteger, "lshift_cpu")},
      {"__rshift__", promoted(Kind::kNotInteger, "rshift_cpu")},
      {"__irshift__", promoted(Kind::kNotInteger, "rshift_cpu")},
      {"bitwise_right_shift", promoted(Kind::kNotInteger, "rshift_cpu")},
      {"_standard_gamma_grad", {Kind::kHalfFloat, "_standard_gamma_grad_cpu"}},
      {"threshold", {Kind::kBool, "threshold_cpu"}},
      // (CPU names its kernel by the dimension, "softmax_lastdim_kernel_impl" for the last one.)
      {"_softmax", {Kind::kInteger, "softmax_kernel_impl"}},
      {"_softmax", {Kind::kBool, "softmax_kernel_impl"}},
      {"_log_softmax", {Kind::kInteger, "log_softmax_kernel_impl"}},
      {"_log_softmax", {Kind::kBool, "log_softmax_kernel_impl"}},
      // CPU computes few ops in complex32 (add, sub, mul, neg, conj, abs, cat, fill_, copies, ...);
      // tpu computes every lowered op in complex64 and rounds (as CUDA's chalf kernels), except
      // these, which CPU refuses and PyTorch code meets (foreach ops with a complex Scalar).
      {"div", {Kind::kComplexHalf, "div_cpu"}},
      {"pow", {Kind::kComplexHalf, "pow"}},
      {"sum", {Kind::kComplexHalf, "sum_cpu"}},
      {"exp", {Kind::kComplexHalf, "exp_vml_cpu"}},
      {"mm", {Kind::kComplexHalf, "addmm_impl_cpu_"}},
      {"addmm", {Kind::kComplexHalf, "addmm_impl_cpu_"}},
      // float8: CPU stores, converts, copies, indexes, multiplies and matmuls them, little else.
      {"add", {Kind::kFloat8, "add_stub"}},
      {"sub", {Kind::kFloat8, "add_stub"}},
      {"neg", {Kind::kFloat8, "neg_cpu"}},
      {"div", {Kind::kFloat8, "div_cpu"}},
      {"exp", {Kind::kFloat8, "exp_vml_cpu"}},
      {"sum", {Kind::kFloat8, "sum_cpu"}},
      {"mean", {Kind::kFloat8, "sum_cpu"}},
      {"max", {Kind::kFloat8, "max_all", nullptr, false, ""}},
      {"min", {Kind::kFloat8, "min_all", nullptr, false, ""}},
      {"amax", {Kind::kFloat8, "max_values_cpu"}},
      {"relu", {Kind::kFloat8, "clamp_min_scalar_cpu"}},
      {"clamp", {Kind::kFloat8, "clamp_scalar_cpu"}},
      {"masked_fill", {Kind::kFloat8, "masked_fill"}},
      {"sort", {Kind::kFloat8, "sorting_kernel_method_name"}},
      {"gt", {Kind::kFloat8, "gt_cpu"}},
      {"lt", {Kind::kFloat8, "lt_cpu"}},
      {"logical_and", {Kind::kComplexHalf, "logical_and_cpu"}},
      {"logical_or", {Kind::kComplexHalf, "logical_or_cpu"}},
      {"logical_xor", {Kind::kComplexHalf, "logical_xor_cpu"}},
  };
  return table;
}

bool is(Kind kind, c10::ScalarType t) {
  switch (kind) {
    case Kind::kBool: return t == c10::kBool;
    case Kind::kComplex: return c10::isComplexType(t);
    case Kind::kInteger: return c10::isIntegralType(t, /*includeBool=*/false);
    case Kind::kComplexHalf: return t == c10::kComplexHalf;
    case Kind::kFloat8: return t == c10::kFloat8_e4m3fn || t == c10::kFloat8_e5m2;
    case Kind::kFloating: return c10::isFloatingType(t) || c10::isComplexType(t);
    case Kind::kNotInteger: return !c10::isIntegralType(t, /*includeBool=*/false);
    case Kind::kHalfFloat: return t == c10::kHalf || t == c10::kBFloat16;
  }
  return false;
}

// The dtype PyTorch's promotion gives the op's tensor and Scalar arguments together.
c10::ScalarType result_type(const std::vector<c10::IValue>& args) {
  at::native::ResultTypeState state;
  for (const c10::IValue& a : args) {
    if (a.isTensor() && a.toTensor().defined()) state = at::native::update_result_type_state(a.toTensor(), state);
    else if (a.isScalar()) state = at::native::update_result_type_state(a.toScalar(), state);
  }
  return at::native::result_type(state);
}

}  // namespace

ScalarRangeChecks scalar_range_checks(const c10::FunctionSchema& schema) {
  using T = ScalarRangeChecks::Target;
  using C = ScalarRangeChecks::Checked;
  struct Rule {
    std::vector<std::string> names;  // the checked arguments; empty: every Scalar
    T target;
    C checked;
  };
  // By the op's name without the in-place underscore; measured against CPU PyTorch 2.11: add's
  // `other` Scalar wraps (only alpha is checked); addcmul's value converts to float for 16-bit
  // floats, pow's exponent is checked for integer and 16-bit float results (wider floats take it
  // as a double).
  static const std::unordered_map<std::string, Rule> rules = {
      {"clamp", {{}, T::kPromoted, C::kAll}},        {"clamp_min", {{}, T::kPromoted, C::kAll}},
      {"clamp_max", {{}, T::kPromoted, C::kAll}},
      {"add", {{"alpha"}, T::kPromoted, C::kAll}},   {"sub", {{"alpha"}, T::kPromoted, C::kAll}},
      {"rsub", {{"alpha"}, T::kPromoted, C::kAll}},  {"pow", {{}, T::kPromoted, C::kIntegralAndHalf}},
      {"addcmul", {{}, T::kSelf, C::kOpmath}},       {"addcdiv", {{}, T::kSelf, C::kOpmath}},
      {"masked_fill", {{}, T::kSelf, C::kAll}},      {"index_fill", {{}, T::kSelf, C::kAll}},
      {"scatter", {{}, T::kSelf, C::kAll}},          {"threshold", {{}, T::kSelf, C::kAll}},
      {"hardtanh", {{}, T::kSelf, C::kAll}},
  };
  std::string name = schema.name().substr(schema.name().find("::") + 2);
  if (name.size() > 1 && name.back() == '_') name.pop_back();
  ScalarRangeChecks checks;
  auto rule = rules.find(name);
  if (rule == rules.end()) return checks;
  checks.target = rule->second.target;
  checks.checked = rule->second.checked;
  checks.integer_powers = name == "pow";
  using P = ScalarRangeChecks::Probe;
  checks.probe = name == "clamp" ? P::kClamp : name == "clamp_min" ? P::kClampMin : name == "clamp_max" ? P::kClampMax
                 : name == "hardtanh" ? P::kHardtanh : P::kNone;
  const std::vector<std::string>& names = rule->second.names;
  for (size_t i = 0; i < schema.arguments().size(); ++i) {
    const c10::Argument& a = schema.arguments()[i];
    c10::TypePtr t = a.type();
    if (auto opt = t->cast<c10::OptionalType>()) t = opt->getElementType();
    bool named = names.empty() || std::find(names.begin(), names.end(), a.name()) != names.end();
    if (t->kind() == c10::TypeKind::NumberType && named) checks.args.push_back(i);
  }
  return checks;
}

void check_scalar_ranges(const ScalarRangeChecks& checks, const std::vector<c10::IValue>& args) {
  using C = ScalarRangeChecks::Checked;
  if (checks.args.empty() || !args[0].isTensor()) return;
  using P = ScalarRangeChecks::Probe;
  // Small integers fit every dtype: the common calls (add's alpha=1) skip the promotion. (Not
  // negative ones for clamp: PyTorch 2.15 refuses uint8 clamp(max=-1).)
  int64_t smallest = checks.probe == P::kNone ? -128 : 0;
  auto small = [&](size_t i) {
    return !args[i].isScalar() || (args[i].isInt() && args[i].toInt() >= smallest && args[i].toInt() <= 127);
  };
  if (!checks.integer_powers && std::all_of(checks.args.begin(), checks.args.end(), small)) return;
  c10::ScalarType t = checks.target == ScalarRangeChecks::Target::kSelf ? args[0].toTensor().scalar_type()
                                                                         : result_type(args);
  bool integral = c10::isIntegralType(t, /*includeBool=*/true);
  if (checks.probe != P::kNone && integral) {
    // CPU's own judgement of the bounds (its errors, in the installed version's words), on one
    // element of self's dtype: the op promotes it as it does self.
    at::Tensor one = at::zeros({1}, at::TensorOptions().dtype(args[0].toTensor().scalar_type()));
    auto bound = [&](size_t i) {
      return args[i].isScalar() ? std::optional<c10::Scalar>(args[i].toScalar()) : std::nullopt;
    };
    switch (checks.probe) {
      case P::kClamp: (void)at::clamp(one, bound(1), bound(2)); break;
      case P::kClampMin: (void)at::clamp_min(one, args[1].toScalar()); break;
      case P::kClampMax: (void)at::clamp_max(one, args[1].toScalar()); break;
      case P::kHardtanh: (void)at::hardtanh(one, args[1].toScalar(), args[2].toScalar()); break;
      case P::kNone: break;
    }
    return;
  }
  bool half = t == c10::kHalf || t == c10::kBFloat16;
  if (checks.checked == C::kIntegralAndHalf && !integral && !half) return;
  if (checks.checked == C::kOpmath && half) t = c10::kFloat;
  for (size_t i : checks.args) {
    if (!args[i].isScalar()) continue;
    c10::Scalar s = args[i].toScalar();
    TORCH_CHECK(!(checks.integer_powers && integral && s.isIntegral(false) && s.toLong() < 0),
                "Integers to negative integer powers are not allowed.");
    check_scalar_fits(s, t);
  }
}

bool clamp_clips_integer_bounds() {
  static const bool clips = [] {
    try {  // clipped: 0 stays 0; wrapped: min=255
      return at::clamp(at::zeros({1}, at::TensorOptions().dtype(c10::kByte)), c10::Scalar(-1), std::nullopt).item<uint8_t>() == 0;
    } catch (const c10::Error&) {
      return false;
    }
  }();
  return clips;
}

void check_scalar_fits(const c10::Scalar& value, c10::ScalarType dtype) {
  switch (dtype) {  // Scalar::to<T> is CPU's checked conversion: it raises CPU's error on overflow
#define TORCHTPU_CHECK_FITS(cpp_type, name) \
  case c10::ScalarType::name:               \
    (void)value.to<cpp_type>();             \
    break;
    AT_FORALL_SCALAR_TYPES_WITH_COMPLEX(TORCHTPU_CHECK_FITS)
#undef TORCHTPU_CHECK_FITS
    default:
      break;
  }
}

void check_cpu_dtype_support(const std::string& op, const std::string& overload,
                             const std::vector<c10::IValue>& args) {
  std::string name = op.substr(op.find("::") + 2);
  bool inplace = name.size() > 1 && name.back() == '_' && name[name.size() - 2] != '_';  // not __lshift__
  if (inplace) name.pop_back();
  // Truncating division of complex numbers, which PyTorch's meta kernel lets through.
  if (name == "div" && args.size() > 2 && args[2].isString() && args[2].toStringRef() == "trunc") {
    c10::ScalarType computed = result_type(args);
    TORCH_CHECK_NOT_IMPLEMENTED(!c10::isComplexType(computed),
                                "\"div_trunc_cpu\" not implemented for '", c10::toString(computed), "'");
  }
  // ldexp: CPU's exact kernel (a float x, an integer exponent) refuses bool exponents, and an
  // in-place ldexp_ raises its own cast error where the meta kernel lets it through.
  if (name == "ldexp" && args.size() > 1 && args[0].isTensor() && args[1].isTensor()) {
    c10::ScalarType x = args[0].toTensor().scalar_type(), e = args[1].toTensor().scalar_type();
    TORCH_CHECK_NOT_IMPLEMENTED(!(c10::isFloatingType(x) && e == c10::kBool), "\"ldexp_cpu_exp\" not implemented for 'Bool'");
    TORCH_CHECK(!inplace || c10::isFloatingType(x) || c10::isComplexType(x), "ldexp can't be cast to the desired output type ",
                c10::toString(x));
  }
  auto [first, last] = refusals().equal_range(name);
  if (first == last) return;
  for (auto it = first; it != last; ++it) {
    const Refusal& r = it->second;
    if (!on_result_type(r.kind) || (r.overload && overload != r.overload)) continue;
    c10::ScalarType computed = result_type(args);
    TORCH_CHECK_NOT_IMPLEMENTED(!is(r.kind, computed), '"', r.kernel, "\" not implemented for '", c10::toString(computed), "'");
  }
  if (args.empty()) return;
  bool tensor_self = args[0].isTensor();  // not xlogy(2.0, t)
  std::optional<c10::ScalarType> t;
  if (tensor_self) t = args[0].toTensor().scalar_type();
  TORCH_CHECK(!(inplace && name == "abs" && t && c10::isComplexType(*t)), "In-place abs is not supported for complex tensors.");
  for (auto it = first; it != last; ++it) {
    const Refusal& r = it->second;
    if (on_result_type(r.kind) || (r.overload && overload != r.overload)) continue;
    if (!tensor_self && !r.all_promote) continue;
    // clamp(bools, max=2) computes in int64, as CPU does; addcmul's value does not promote.
    c10::ScalarType computed = r.all_promote ? result_type(args) : *t;
    if (inplace && !c10::canCast(computed, *t)) continue;  // the meta kernel's cast error comes first
    for (size_t i = 1; r.scalars_promote && i < args.size(); ++i)
      if (args[i].isScalar()) computed = c10::promoteTypes(computed, at::result_type(args[0].toTensor(), args[i].toScalar()));
    if (!is(r.kind, computed)) continue;
    if (!r.message) TORCH_CHECK_NOT_IMPLEMENTED(false, '"', r.kernel, "\" not implemented for '", c10::toString(computed), "'");
    if (r.runtime_error) TORCH_CHECK(false, r.message);
    if (r.type_error) TORCH_CHECK_TYPE(false, r.message);
    TORCH_CHECK_NOT_IMPLEMENTED(false, r.message);
  }
}

}  // namespace torchtpu::aten
