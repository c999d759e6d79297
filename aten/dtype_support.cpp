#include "aten/dtype_support.h"

#include <ATen/native/TypeProperties.h>
#include <ATen/ops/clamp.h>
#include <ATen/ops/clamp_max.h>
#include <ATen/ops/clamp_min.h>
#include <ATen/ops/hardtanh.h>
#include <ATen/ops/result_type.h>
#include <ATen/ops/zeros.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <optional>
#include <unordered_map>

namespace torchtpu::aten {
namespace {

// Refusals of these kinds are judged on the type all arguments promote to, before any other.
bool on_result_type(Refused kind) { return kind == Refused::kComplexHalf || kind == Refused::kFloat8; }

bool is(Refused kind, c10::ScalarType t) {
  switch (kind) {
    case Refused::kBool: return t == c10::kBool;
    case Refused::kComplex: return c10::isComplexType(t);
    case Refused::kInteger: return c10::isIntegralType(t, /*includeBool=*/false);
    case Refused::kComplexHalf: return t == c10::kComplexHalf;
    case Refused::kFloat8: return t == c10::kFloat8_e4m3fn || t == c10::kFloat8_e5m2;
    case Refused::kFloating: return c10::isFloatingType(t) || c10::isComplexType(t);
    case Refused::kNotInteger: return !c10::isIntegralType(t, /*includeBool=*/false);
    case Refused::kHalfFloat: return t == c10::kHalf || t == c10::kBFloat16;
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
                             const std::vector<CpuRefusal>& refusals, const std::vector<c10::IValue>& args) {
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
  if (refusals.empty()) return;
  for (const CpuRefusal& r : refusals) {
    if (!on_result_type(r.kind) || (r.overload && overload != r.overload)) continue;
    c10::ScalarType computed = result_type(args);
    TORCH_CHECK_NOT_IMPLEMENTED(!is(r.kind, computed), '"', r.kernel, "\" not implemented for '", c10::toString(computed), "'");
  }
  if (args.empty()) return;
  bool tensor_self = args[0].isTensor();  // not xlogy(2.0, t)
  std::optional<c10::ScalarType> t;
  if (tensor_self) t = args[0].toTensor().scalar_type();
  TORCH_CHECK(!(inplace && name == "abs" && t && c10::isComplexType(*t)), "In-place abs is not supported for complex tensors.");
  for (const CpuRefusal& r : refusals) {
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
