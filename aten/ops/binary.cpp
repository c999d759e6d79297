// Element-wise ops of two or more operands: arithmetic, comparisons, logic, where, clamp, lerp.
// Operands arrive cast to the output dtype (PyTorch's promotion, computed by the meta kernel)
// and are broadcast here with in_b().
#include <ATen/Version.h>
#include <ATen/native/BinaryOps.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/result_type.h>

#include <algorithm>
#include <cmath>

#include "aten/dtype_support.h"
#include "aten/lowering.h"
#include "aten/ops/lowering_util.h"
#include "aten/ops/math.h"

namespace torchtpu::aten {
namespace {

// Operand i of add/sub in opmath, rounded to the output dtype first: CPU's add kernel sees a
// Scalar (x + 0.3 in float16) as a tensor of the output dtype, where mul and div keep its value.
Value rounded_operand(LoweringContext& c, size_t i) {
  return cast(c.b, c.elementwise_input(i), accumulator(c.compute_dtype()));
}

// bfloat16/float16 mul and div take a one-element second operand of a wider dtype (x * 0.3, a 0-d
// float32 tensor) at its own value and compute in float32, rounding once, as CPU's and CUDA's
// kernels do; rounding it to the dtype first put nearly half of a float16 x * 6.28 an ulp off.
// Operands of the output dtype multiply exactly either way and stay in it.
bool wide_scalar_operand(LoweringContext& c) {
  if (!low_precision(c.compute_dtype())) return false;
  const c10::IValue& b = c.arg(1);
  return b.isScalar() || (b.isTensor() && b.toTensor().numel() == 1 && c.input_uncast(1).type.dtype != c.compute_dtype());
}

Value operand(LoweringContext& c, size_t i, bool in_opmath) { return in_opmath ? opmath_b(c, i) : c.elementwise_input(i); }

// alpha * b (alpha is argument `alpha_index` when present), in opmath: CPU adds a + alpha * b of
// bfloat16/float16 in float32 and rounds once.
Value scaled(LoweringContext& c, size_t i, size_t alpha_index) {
  Value v = rounded_operand(c, i);
  if (!c.has(alpha_index)) return v;
  Value alpha = cast(c.b, c.input(alpha_index), v.type.dtype);  // rounded to the output dtype first, as CPU's
  return v * c.broadcast_to_output(alpha);
}

// CPU's element-wise loop over these operands (broadcast to the output) as TensorIterator runs it:
// an inner loop over the trailing dimensions that every operand steps through evenly (coalesced),
// vectorized when each operand steps by one element (one may stay still: a Scalar). Unknown
// (nullopt) where TensorIterator would reorder dimensions (an operand laid out in another order).
struct CpuLoop {
  int64_t length;
  bool vectorized;
};

std::optional<CpuLoop> cpu_inner_loop(const LoweringContext& c, std::initializer_list<size_t> operands) {
  const std::vector<int64_t>& dims = c.out().dims;
  std::vector<int64_t> sizes;  // over dimensions > 1, with each operand's strides there
  for (int64_t size : dims)
    if (size > 1) sizes.push_back(size);
  std::vector<std::vector<int64_t>> strides;
  for (size_t i : operands) {
    const c10::IValue& a = c.arg(i);
    std::vector<int64_t> all = a.isTensor() ? a.toTensor().expand(dims).strides().vec() : std::vector<int64_t>(dims.size(), 0);
    strides.emplace_back();
    for (size_t d = 0; d < dims.size(); ++d)
      if (dims[d] > 1) strides.back().push_back(all[d]);
  }
  if (sizes.empty()) return CpuLoop{1, true};
  auto row_major = [](const std::vector<int64_t>& s) {
    for (size_t d = 0; d + 1 < s.size(); ++d)
      if (s[d] != 0 && s[d] < s[d + 1]) return false;
    return true;
  };
  if (!std::all_of(strides.begin(), strides.end(), row_major)) {
    // Operands in different orders: whichever TensorIterator picks, one steps unevenly.
    bool dense_row_major = std::any_of(strides.begin(), strides.end(), [&](const auto& s) {
      return row_major(s) && std::find(s.begin(), s.end(), 0) == s.end();
    });
    if (dense_row_major) return CpuLoop{0, false};
    return std::nullopt;
  }
  int64_t length = sizes.back();
  for (size_t d = sizes.size() - 1; d > 0; --d) {
    bool even = std::all_of(strides.begin(), strides.end(), [&](const auto& s) { return s[d - 1] == sizes[d] * s[d]; });
    if (!even) break;
    length *= sizes[d - 1];
  }
  int still = 0;
  bool unit = true;
  for (const std::vector<int64_t>& s : strides) {
    still += s.back() == 0;
    unit &= s.back() == 0 || s.back() == 1;
  }
  return CpuLoop{length, unit && still <= 1};
}

// a op alpha * b for add/sub/rsub (op: kAdd or kSubtract). CPU's add kernel on bfloat16/float16
// computes it two ways, alpha rounded to the dtype in both: its vectorized loop in float32,
// rounding once (as CUDA); its scalar loop rounds alpha * b to the dtype first. The scalar loop
// does the last L mod 32 elements of each vectorized inner loop of L elements (an AVX-512 vector
// of 16-bit floats; 16 on other CPUs) and all of a strided one, so those can be an ulp apart.
// Reproduced where CPU's loop is known: operands in row-major order and one thread's chunk (fewer
// than 32,768 elements, at::internal::GRAIN_SIZE); elsewhere rounded once.
Value add_scaled_by_alpha(LoweringContext& c, BinaryOp op, size_t a, size_t b) {
  Value lhs = rounded_operand(c, a), product = scaled(c, b, 2);
  Value fused = c.b.binary(op, lhs, product);
  std::optional<DType> low = low_precision(c.compute_dtype());
  int64_t n = 1;
  for (int64_t d : c.out().dims) n *= d;
  std::optional<CpuLoop> loop = low && c.has(2) && n < 32768 ? cpu_inner_loop(c, {a, b}) : std::nullopt;
  static const int64_t block = at::get_cpu_capability() == "AVX512" ? 32 : 16;
  if (!loop || (loop->vectorized && loop->length % block == 0)) return fused;
  Value tail = c.b.binary(op, lhs, rounded_to(c.b, product, *low));
  if (!loop->vectorized) return tail;
  Value position = c.b.reshape(c.b.iota({DType::kS64, {n}}, 0), c.out().dims);  // row-major
  auto k = [&](int64_t v) { return c.b.constant(static_cast<double>(v), position.type); };
  Value within = c.b.binary(BinaryOp::kRemainder, position, k(loop->length));
  Value in_tail = c.b.compare(Compare::kGE, within, k(loop->length - loop->length % block));
  return c.b.select(in_tail, tail, fused);
}

// addcmul / addcdiv: self + value * t1 op t2, in CPU's order ((value * t1) op t2), in opmath.
Lowering add_scaled(BinaryOp op) {
  return [op](LoweringContext& c) {
    Value scaled = opmath_b(c, 3) * opmath_b(c, 1);
    return Values{opmath_b(c, 0) + c.b.binary(op, scaled, opmath_b(c, 2))};
  };
}

// CPU converts Scalar argument i to the type it computes in, and a complex value with an imaginary
// part does not convert to a real one; PyTorch's meta kernels let it through.
std::function<void(const std::vector<c10::IValue>&)> real_scalar(size_t i) {
  return [i](const std::vector<c10::IValue>& args) {
    const c10::IValue& s = args.at(i);
    c10::ScalarType t = args.at(0).toTensor().scalar_type();
    if (!s.isScalar() || !s.toScalar().isComplex() || c10::isComplexType(t) || s.toScalar().toComplexDouble().imag() == 0) return;
    const char* name = t == c10::kDouble ? "double" : c10::isFloatingType(t) ? "float"
                       : t == c10::kLong ? "int64_t" : t == c10::kInt ? "int" : t == c10::kShort ? "int16_t"
                       : t == c10::kChar ? "int8_t" : t == c10::kByte ? "uint8_t" : "bool";
    TORCH_CHECK(false, "value cannot be converted to type ", name, " without overflow");
  };
}

// CPU's clamp raises for complex bounds; PyTorch's meta kernel only checks complex tensors.
void no_complex_bounds(const std::vector<c10::IValue>& args) {
  for (const c10::IValue& a : args)
    TORCH_CHECK(!(a.isScalar() && a.toScalar().isComplex()) && !(a.isTensor() && a.toTensor().is_complex()),
                "clamp is not supported for complex types");
}


// Integer a / b (truncating) and a % b with XLA's answers where x86 would trap (b == 0: -1 and a;
// INT_MIN / -1: INT_MIN and 0), computed without ever dividing by 0 or -1: XLA folds divisions of
// constants at compile time, and a trapping one there kills the process (SIGFPE). A zero divisor
// fails the op's device check (zero_divisor_checked): CPU PyTorch raises ZeroDivisionError, CUDA
// returns those values.
std::pair<Value, Value> int_div_rem(LoweringContext& c, const Value& a, const Value& b) {
  Value zero = c.b.compare(Compare::kEQ, b, c.full(0, b));
  c.check_on_device(all_true(c.b, c.b.unary(UnaryOp::kNot, zero)));
  Value minus_one = is_unsigned(b.type.dtype) || b.type.dtype == DType::kBool
                        ? c.b.constant(0, {DType::kBool, b.type.dims})
                        : c.b.compare(Compare::kEQ, b, c.full(-1, b));
  Value safe = c.b.select(c.b.binary(BinaryOp::kOr, zero, minus_one), c.full(1, b), b);
  Value q = c.b.select(minus_one, -a, a / safe);
  Value r = c.b.select(minus_one, c.full(0, a), c.b.binary(BinaryOp::kRemainder, a, safe));
  return {c.b.select(zero, c.full(-1, q), q), c.b.select(zero, a, r)};
}

// Integer division and remainder raise CPU's "ZeroDivisionError" for a zero divisor, at the next
// host sync (as an out-of-range index does); floating-point ones give inf or NaN, unchecked.
LoweringOptions zero_divisor_checked() {
  LoweringOptions o = checked("ZeroDivisionError");
  o.device_check_runtime_error = true;
  o.device_check_when = [](const std::vector<c10::IValue>& args) {
    const c10::IValue &a = args.at(0), &b = args.at(1);
    if (args.size() > 2 && args[2].isNone()) return false;  // div's true division (rounding_mode=None)
    c10::ScalarType t = a.isTensor() && b.isTensor() ? at::result_type(a.toTensor(), b.toTensor())
                        : a.isTensor()               ? at::result_type(a.toTensor(), b.toScalar())
                                                     : at::result_type(a.toScalar(), b.toTensor());
    return c10::isIntegralType(t, /*includeBool=*/true);
  };
  // Padded, the box's padding reads as ones: the check sees every position, and a zero there is
  // no divisor of the user's.
  return padded(o, pointwise_padding(exec::Fill::kOne));
}

Value divide(LoweringContext& c, const Value& a, const Value& b) {
  return is_floating(a.type.dtype) || is_complex(a.type.dtype) ? a / b
                                                                : int_div_rem(c, a, b).first;
}

Value remainder(LoweringContext& c, const Value& a, const Value& b) {
  return is_floating(a.type.dtype) ? c.b.binary(BinaryOp::kRemainder, a, b) : int_div_rem(c, a, b).second;
}

// gcd(a, b) of integers as CPU's calc_gcd: Euclid's algorithm on every element at once, until
// every element's remainder is 0 (at most 92 rounds for 64-bit integers).
Value gcd(LoweringContext& c, const Value& a, const Value& b) {
  std::vector<int64_t> all;
  for (int64_t d = 0; d < a.type.rank(); ++d) all.push_back(d);
  Values out = c.b.while_loop(
      {c.b.unary(UnaryOp::kAbs, a), c.b.unary(UnaryOp::kAbs, b)},
      [&](hlo::Builder& rb, const Values& x) {
        Value running = rb.compare(Compare::kNE, x[0], rb.constant(0, x[0].type));
        return Values{rb.reduce({running}, {rb.constant(0, {DType::kBool, {}})}, all, combine_with(BinaryOp::kOr))[0]};
      },
      [](hlo::Builder& rb, const Values& x) {
        Value running = rb.compare(Compare::kNE, x[0], rb.constant(0, x[0].type));
        Value divisor = rb.select(running, x[0], rb.constant(1, x[0].type));
        return Values{rb.select(running, rb.binary(BinaryOp::kRemainder, x[1], divisor), x[0]),
                      rb.select(running, x[0], x[1])};
      });
  return out[1];
}

// lcm(a, b) = |a / gcd(a, b) * b|, 0 when both are 0, as CPU computes it: in C++'s int for
// narrower types (then truncated), so a product that overflows them wraps as CPU's does.
Value lcm(LoweringContext& c, const Value& a, const Value& b) {
  Value g = gcd(c, a, b);
  Value zero = c.b.compare(Compare::kEQ, g, c.full(0, g));
  Value q = a / c.b.select(zero, c.full(1, g), g);
  DType t = a.type.dtype;
  DType wide = element_size(t) < 4 ? DType::kS32 : t;
  Value product = c.b.convert(q, wide) * c.b.convert(b, wide);
  Value l = c.b.convert(c.b.unary(UnaryOp::kAbs, product), t);
  return c.b.select(zero, c.full(0, g), l);
}

Value is_negative(LoweringContext& c, const Value& x) {  // -0.0 included: 1 / -0.0 = -inf
  return c.b.compare(Compare::kLT, c.full(1, x) / x, c.full(0, x));
}

// PyTorch's floor division of floats (div_floor_floating): from fmod rather than floor(a / b),
// so that a / b rounding up to an integer does not overshoot, and infinities give what CPU gives
// (inf // 1 is NaN, 5 // -inf is -1).
Value floor_div_floating(LoweringContext& c, const Value& a, const Value& b) {
  Value zero = c.full(0, a), one = c.full(1, a);
  Value mod = c.b.binary(BinaryOp::kRemainder, a, b);
  Value div = (a - mod) / b;
  Value signs_differ = c.b.compare(Compare::kNE, c.b.compare(Compare::kLT, b, zero), c.b.compare(Compare::kLT, mod, zero));
  div = c.b.select(c.b.binary(BinaryOp::kAnd, c.b.compare(Compare::kNE, mod, zero), signs_differ),
                   div - one, div);
  Value floored = c.b.unary(UnaryOp::kFloor, div);
  floored = c.b.select(c.b.compare(Compare::kGT, div - floored, c.full(0.5, a)),
                       floored + one, floored);
  Value quotient = a / b;
  Value signed_zero = c.b.select(is_negative(c, quotient), c.full(-0.0, a), zero);
  Value result = c.b.select(c.b.compare(Compare::kNE, div, zero), floored, signed_zero);
  return c.b.select(c.b.compare(Compare::kEQ, b, zero), quotient, result);
}

// Python-style floor division: rounds toward negative infinity for floats and integers.
Value floor_div(LoweringContext& c, const Value& a, const Value& b) {
  if (is_floating(a.type.dtype)) return floor_div_floating(c, a, b);
  auto [q, r] = int_div_rem(c, a, b);
  Value zero = c.full(0, a);
  Value signs_differ = c.b.compare(Compare::kNE, c.b.compare(Compare::kLT, r, zero),
                                   c.b.compare(Compare::kLT, b, zero));
  Value adjust = c.b.binary(BinaryOp::kAnd, c.b.compare(Compare::kNE, r, zero), signs_differ);
  return c.b.select(adjust, q - c.full(1, q), q);
}

Value trunc(LoweringContext& c, const Value& x) {
  Value zero = c.full(0, x);
  return c.b.select(c.b.compare(Compare::kLT, x, zero), c.b.unary(UnaryOp::kCeil, x),
                    c.b.unary(UnaryOp::kFloor, x));
}

// Python-style remainder: the result has the divisor's sign.
Value py_remainder(LoweringContext& c, const Value& a, const Value& b) {
  Value r = remainder(c, a, b);
  Value zero = c.full(0, r);
  Value fix = c.b.binary(BinaryOp::kAnd, c.b.compare(Compare::kNE, r, zero),
                         c.b.compare(Compare::kNE, c.b.compare(Compare::kLT, r, zero),
                                     c.b.compare(Compare::kLT, b, zero)));
  return c.b.select(fix, r + b, r);
}

// CPU's checks of add: an in-place result must be castable to self, alpha must suit the result
// dtype. PyTorch's Python meta kernel words the first differently, raises ValueError for a float
// alpha, and takes a bool alpha for any dtype.
void check_alpha(const c10::FunctionSchema& schema, const std::vector<c10::IValue>& args) {
  const at::Tensor& self = args[0].toTensor();
  c10::ScalarType t = args[1].isTensor() ? at::result_type(self, args[1].toTensor())
                                          : at::result_type(self, args[1].toScalar());
  bool inplace = schema.name().back() == '_';
  TORCH_CHECK(!inplace || c10::canCast(t, self.scalar_type()), "result type ", t,
              " can't be cast to the desired output type ", self.scalar_type());
  if (args.size() >= 3 && args[2].isScalar()) at::native::alpha_check(t, args[2].toScalar());
}

// PyTorch's meta kernel for add/sub/rsub after CPU's checks (`check` for sub's bools).
MetaFn add_meta(void (*check)(const std::vector<c10::IValue>&) = nullptr) {
  return [check](const c10::FunctionSchema& schema, const std::vector<c10::IValue>& args) {
    if (check) check(args);
    check_alpha(schema, args);
    return meta_kernel(schema.name(), schema.overload_name(), args);
  };
}

// CPU refuses to subtract bools (the meta kernels compute something).
void no_bool_subtraction(const std::vector<c10::IValue>& args) {
  auto is_bool = [](const c10::IValue& v) {
    return v.isTensor() ? v.toTensor().scalar_type() == at::kBool : v.isScalar() && v.toScalar().isBoolean();
  };
  TORCH_CHECK(!is_bool(args[0]) || !is_bool(args[1]),
              "Subtraction, the `-` operator, with two bool tensors is not supported. Use the `^` or "
              "`logical_xor()` operator instead.");
  TORCH_CHECK(!is_bool(args[0]) && !is_bool(args[1]),
              "Subtraction, the `-` operator, with a bool tensor is not supported. If you are trying to invert "
              "a mask, use the `~` or `logical_not()` operator instead.");
}

// PyTorch's meta kernels for the shift operators (x << s) refuse bool operands, which CPU shifts in
// their promoted dtype (bools << 1 is int64): bitwise_left_shift's meta kernels promote as CPU does.
MetaFn shift_meta(const char* bitwise) {
  return [bitwise](const c10::FunctionSchema& schema, const std::vector<c10::IValue>& args) {
    bool inplace = schema.name().rfind("aten::__i", 0) == 0;
    bool out = schema.arguments().back().is_out();
    std::string name = std::string("aten::") + bitwise + (inplace ? "_" : "");
    std::string overload = std::string(args[1].isScalar() ? "Tensor_Scalar" : "Tensor") + (out ? "_out" : "");
    return meta_kernel(name, overload, args);
  };
}

// masked_fill's meta kernel (a Python reference) takes a CPU 0-d value beside the devices it lists
// (CUDA's, tpu's), not beside the meta tensors output metadata is computed with: the value joins
// them as a meta scalar (its contents reach the program as an input, as any CPU scalar's do).
std::vector<c10::IValue> masked_fill_meta(const c10::FunctionSchema& schema, const std::vector<c10::IValue>& args) {
  std::vector<c10::IValue> meta_args(args);
  if (meta_args[2].isTensor() && meta_args[2].toTensor().is_cpu())
    meta_args[2] = at::empty({}, meta_args[2].toTensor().options().device(c10::kMeta));
  return meta_kernel(schema.name(), schema.overload_name(), meta_args);
}

// x ** e; for bools (CPU keeps them bools) that is x or not e.
// Complex powers as CPU's cpow, exp(e * log(x)), where 0 ** e is 0 for Re(e) > 0 (C99's cexp of
// -inf; XLA gives NaN); in complex128, as XLA's complex64 power loses several ulps on large powers.
Value complex_power(LoweringContext& c, const Value& x, const Value& e) {
  Value wx = cast(c.b, x, DType::kC128), we = cast(c.b, e, DType::kC128);
  Value p = c.b.binary(BinaryOp::kPower, wx, we);
  Value re = c.b.unary(UnaryOp::kReal, we);
  Value zero_base = c.b.binary(BinaryOp::kAnd, c.b.compare(Compare::kEQ, wx, c.full(0, wx)),
                               c.b.compare(Compare::kGT, re, c.full(0, re)));
  return cast(c.b, c.b.select(zero_base, c.full(0, p), p), x.type.dtype);
}

// Integer powers wrap as CPU's square-and-multiply does. XLA's integer power squares six times
// only (3 ** 64 gave 1): the exponent is taken six bits at a time, x^e = prod x^(64^i * e_i). The
// squarings run on x before it is broadcast (XLA's simplifier loops on squared broadcasts).
Value integer_power(LoweringContext& c, const Value& x, const Value& e) {
  hlo::Builder& b = c.b;
  Value low_bits = b.constant_int(63, e.type), six = b.constant_int(6, e.type);
  Value result = b.binary(BinaryOp::kPower, c.broadcast_to_output(x), b.binary(BinaryOp::kAnd, e, low_bits));
  Value rest = b.binary(BinaryOp::kShiftRightLogical, e, six), base = x;
  for (size_t bits = 6; bits < 8 * element_size(e.type.dtype); bits += 6) {
    for (int i = 0; i < 6; ++i) base = base * base;
    Value digit = b.binary(BinaryOp::kAnd, rest, low_bits);
    result = result * b.binary(BinaryOp::kPower, c.broadcast_to_output(base), digit);
    rest = b.binary(BinaryOp::kShiftRightLogical, rest, six);
  }
  Value negative = b.compare(Compare::kLT, e, b.constant(0, e.type));  // XLA's (and CPU's) 0, 1 or -1
  return b.select(negative, b.binary(BinaryOp::kPower, c.broadcast_to_output(x), e), result);
}

Values power(LoweringContext& c) {
  Value x = c.elementwise_input(0), e = c.elementwise_input(1);
  if (x.type.dtype == DType::kBool) return {c.b.binary(BinaryOp::kOr, x, c.b.unary(UnaryOp::kNot, e))};
  if (is_complex(x.type.dtype)) return {complex_power(c, x, e)};
  if (!is_floating(x.type.dtype) && x.type.dtype == e.type.dtype) return {integer_power(c, c.input(0), e)};
  return {c.b.binary(BinaryOp::kPower, x, e)};
}

// 2^k for integers k as a float of type `t`, exactly, from its bits: 0 below t's normal range
// (as XLA flushes subnormals), inf above it.
Value power_of_two(hlo::Builder& b, const Value& k, DType t) {
  FloatFormat f = float_format(t);
  hlo::TensorType type{f.bits, k.type.dims};
  Value e = b.clamp(b.constant_int(-f.bias, type), b.convert(k, f.bits), b.constant_int(f.bias + 1, type));
  Value biased = e + b.constant_int(f.bias, type);
  return b.bitcast_convert(b.binary(BinaryOp::kShiftLeft, biased, b.constant_int(f.fraction, type)), t);
}

// ldexp(x, e) = x * 2^e. A float x with an integer e is scaled exactly, as CPU's std::ldexp: by
// three powers of two of e's sign, so that no partial product overflows or underflows before the
// result does (e is first clamped to where any result saturates). Otherwise x * 2 ** e, as CPU:
// 2 ** e in e's dtype, or float32 for an integer e (a Python 2.0 to a tensor's power).
Values ldexp(LoweringContext& c) {
  hlo::Builder& b = c.b;
  DType x = c.input_uncast(0).type.dtype, e_dtype = c.input_uncast(1).type.dtype, out = c.out().dtype;
  Value e = c.broadcast_to_output(c.input_uncast(1));
  if (is_floating(e_dtype) || is_complex(e_dtype)) {
    Value two_to_e = c.b.binary(BinaryOp::kPower, b.constant(2, e.type), e);
    return {c.elementwise_input(0) * cast(b, two_to_e, out)};
  }
  if (!is_floating(x)) return {c.elementwise_input(0) * cast(b, power_of_two(b, e, DType::kF32), out)};
  DType wide = out == DType::kF64 ? DType::kF64 : DType::kF32;
  FloatFormat f = float_format(wide);
  int64_t limit = 2 * f.bias + f.fraction + 3;
  e = b.convert(e, DType::kS64);
  e = b.clamp(b.constant_int(-limit, e.type), e, b.constant_int(limit, e.type));
  Value third = e / b.constant_int(3, e.type);
  Value rest = e - third;
  Value half = rest / b.constant_int(2, e.type);
  Value r = cast(b, c.elementwise_input(0), wide);
  for (const Value& k : {third, half, rest - half})
    r = r * power_of_two(b, k, wide);
  return {cast(b, r, out)};
}

// PyTorch's meta kernels give pow(bool tensor, bool) an int64 result (and so refuse pow_) where
// CPU keeps bools, as the promotion of the tensor and the scalar says.
std::vector<c10::IValue> pow_scalar_meta(const c10::FunctionSchema& schema, const std::vector<c10::IValue>& args) {
  const at::Tensor& self = args[0].toTensor();
  if (at::result_type(self, args[1].toScalar()) != at::kBool)
    return meta_kernel(schema.name(), schema.overload_name(), args);
  if (schema.name() == "aten::pow_") return {self};
  if (args.size() == 3) {  // out=
    at::Tensor out = args[2].toTensor();
    out.resize_(self.sizes());
    return {out};
  }
  return {at::empty_like(self)};
}

Lowering nan_propagating(BinaryOp op) {
  return [op](LoweringContext& c) { return Values{nan_extreme(c.b, op, c.elementwise_input(0), c.elementwise_input(1))}; };
}

// Comparisons run in the promoted dtype of the operands, then yield bool.
Lowering comparison(Compare dir) {
  return [dir](LoweringContext& c) {
    DType t = c.promoted(0, 1);
    return Values{c.b.compare(dir, c.broadcast_to_output(c.input_as(0, t)), c.broadcast_to_output(c.input_as(1, t)))};
  };
}

// Bit operations run in the operands' promoted (integer) dtype; an out= of another dtype (a
// float one, say) receives the result converted, as on CPU.
Lowering bitwise(BinaryOp op) {
  return [op](LoweringContext& c) {
    DType t = c.promoted(0, 1);
    return Values{c.b.binary(op, c.broadcast_to_output(c.input_as(0, t)), c.broadcast_to_output(c.input_as(1, t)))};
  };
}

// x >> s: sign-filling for signed integers, zero-filling for unsigned ones (a uint8 254 >> 1 is 127).
Values right_shift(LoweringContext& c) {
  DType t = c.promoted(0, 1);
  BinaryOp op = is_unsigned(t) ? BinaryOp::kShiftRightLogical : BinaryOp::kShiftRightArithmetic;
  return Values{c.b.binary(op, c.broadcast_to_output(c.input_as(0, t)), c.broadcast_to_output(c.input_as(1, t)))};
}

Value truthy(LoweringContext& c, size_t i) {
  Value v = c.broadcast_to_output(c.input_uncast(i));
  return v.type.dtype == DType::kBool ? v : c.b.compare(Compare::kNE, v, c.full(0, v));
}

Lowering logical(BinaryOp op) {
  return [op](LoweringContext& c) { return Values{c.b.binary(op, truthy(c, 0), truthy(c, 1))}; };
}

// isin(elements, test_elements, assume_unique, invert): each element compared with every test
// element (test sets are small: token ids, class ids), in the promoted dtype.
Values isin(LoweringContext& c) {
  DType t = c.promoted(0, 1);
  Value e = c.input_as(0, t), test = c.input_as(1, t);
  int64_t n = test.type.element_count(), rank = e.type.rank();
  std::vector<int64_t> dims = e.type.dims, keep(rank);
  dims.push_back(n);
  for (int64_t d = 0; d < rank; ++d) keep[d] = d;
  Value pairs = c.b.compare(Compare::kEQ, c.b.broadcast_in_dim(e, dims, keep),
                            c.b.broadcast_in_dim(c.b.reshape(test, {n}), dims, {rank}));
  Value found = c.b.reduce({pairs}, {c.b.constant(0, {DType::kBool, {}})}, {rank}, combine_with(BinaryOp::kOr))[0];
  return {c.arg(3).toBool() ? c.b.unary(UnaryOp::kNot, found) : found};
}

// log(base^a + base^b) / log(base) for base e (ln_base 1) or 2 (ln 2): the larger operand plus
// the log of 1 + base^-|a - b|; equal infinities give themselves (their difference is NaN).
Value log_add_exp(LoweringContext& c, double ln_base) {
  Value a = opmath_b(c, 0), b = opmath_b(c, 1);
  Value m = c.b.binary(BinaryOp::kMaximum, a, b);
  Value d = -c.b.unary(UnaryOp::kAbs, a - b);
  Value tail = c.b.unary(UnaryOp::kLogPlusOne, c.b.unary(UnaryOp::kExponential, d * c.full(ln_base, d)));
  Value r = m + tail / c.full(ln_base, tail);
  Value same_inf = c.b.binary(BinaryOp::kAnd, c.b.compare(Compare::kEQ, a, b),
                              c.b.unary(UnaryOp::kNot, c.b.unary(UnaryOp::kIsFinite, a)));
  return c.b.select(same_inf, a, r);
}

// nextafter(a, b): the next representable float after a towards b, by stepping a's bit pattern
// (sign-magnitude: away from zero is +1 when a and the step share a sign).
Values next_after(LoweringContext& c) {
  Value a = c.elementwise_input(0), b = c.elementwise_input(1);
  DType t = a.type.dtype;
  DType bits = t == DType::kF64 ? DType::kS64 : t == DType::kF32 ? DType::kS32 : DType::kS16;
  Value ia = c.b.bitcast_convert(a, bits);
  Value one = c.b.constant(1, ia.type);
  Value grow = c.b.compare(Compare::kEQ, c.b.compare(Compare::kLT, a, b), c.b.compare(Compare::kGT, a, c.full(0, a)));
  Value stepped = c.b.bitcast_convert(c.b.select(grow, ia + one, ia - one), t);
  // From zero: the smallest subnormal with b's sign.
  Value tiny = c.b.bitcast_convert(one, t);
  Value from_zero = c.b.select(c.b.compare(Compare::kGT, b, c.full(0, b)), tiny, -tiny);
  Value r = c.b.select(c.b.compare(Compare::kEQ, a, c.full(0, a)), from_zero, stepped);
  r = c.b.select(c.b.compare(Compare::kEQ, a, b), b, r);
  return {c.b.select(c.b.binary(BinaryOp::kOr, is_nan(a), is_nan(b)), a + b, r)};
}

}  // namespace

TORCHTPU_LOWERINGS(binary) {
  PaddedFamily elementwise(pointwise_padding());  // every op here runs padded where sizes vary
  // ... but add, sub and rsub of 16-bit floats: their rounding follows CPU's loop over the exact
  // layout (add_scaled_by_alpha).
  PaddingRule not_in_16_bits = pointwise_padding();
  not_in_16_bits.applies = [](const std::vector<c10::IValue>& args) {
    return std::none_of(args.begin(), args.end(), [](const c10::IValue& a) {
      return a.isTensor() && at::isReducedFloatingType(a.toTensor().scalar_type());
    });
  };
  register_with_variants("add", {"Tensor", "Scalar"}, [](LoweringContext& c) {
    // bool + bool is bool's (an or) also into a wider out=, which CPU casts the sum to
    if (c.promoted(0, 1) == DType::kBool && c.compute_dtype() != DType::kBool) {
      bool alpha = !c.has(2) || c.arg(2).toScalar().toBool();
      Value x = c.broadcast_to_output(c.input_as(0, DType::kBool));
      Value y = alpha ? c.broadcast_to_output(c.input_as(1, DType::kBool)) : c.b.constant(0, x.type);
      return Values{cast(c.b, c.b.binary(BinaryOp::kOr, x, y), c.compute_dtype())};
    }
    return Values{add_scaled_by_alpha(c, BinaryOp::kAdd, 0, 1)};
  }, padded(with_meta(add_meta()), not_in_16_bits));
  // torch._VF._add_relu (what fusing passes make of add + relu); PyTorch has add's meta only
  register_with_variants("_add_relu", {"Tensor", "Scalar"}, [](LoweringContext& c) {
    Value sum = add_scaled_by_alpha(c, BinaryOp::kAdd, 0, 1);
    return Values{c.b.binary(BinaryOp::kMaximum, sum, c.b.constant(0, sum.type))};
  }, padded(with_meta([](const c10::FunctionSchema& schema, const std::vector<c10::IValue>& args) {
    std::string add = schema.name() == "aten::_add_relu_" ? "aten::add_" : "aten::add";
    return add_meta()(c10::FunctionSchema(add, schema.overload_name(), schema.arguments(), schema.returns()), args);
  }), not_in_16_bits));
  register_with_variants("sub", {"Tensor", "Scalar"}, [](LoweringContext& c) {
    return Values{add_scaled_by_alpha(c, BinaryOp::kSubtract, 0, 1)};
  }, padded(with_meta(add_meta(no_bool_subtraction)), not_in_16_bits));
  register_with_variants("rsub", {"Tensor", "Scalar"}, [](LoweringContext& c) {
    return Values{add_scaled_by_alpha(c, BinaryOp::kSubtract, 1, 0)};
  }, padded(with_meta(add_meta(no_bool_subtraction)), not_in_16_bits));
  register_with_variants("mul", {"Tensor", "Scalar"}, [](LoweringContext& c) {
    // float8 products are formed in float32 (exactly) and rounded by the conversion to the output,
    // PyTorch's rounding, saturating float8_e4m3fn where PyTorch does (XLA's own float8 multiply
    // gives NaN beyond ±448).
    DType t = c.compute_dtype();
    bool wide = wide_scalar_operand(c) || t == DType::kF8E4M3FN || t == DType::kF8E5M2;
    return Values{operand(c, 0, wide) * operand(c, 1, wide)};
  });
  register_with_variants("div", {"Tensor", "Scalar"}, [](LoweringContext& c) {
    bool wide = wide_scalar_operand(c);
    return Values{divide(c, operand(c, 0, wide), operand(c, 1, wide))};
  });
  // bfloat16/float16 rounding modes as CPU's kernels: floor in float32; trunc of the quotient
  // rounded to the dtype, unless the divisor is one element (then in float32, as for mul)
  register_with_variants("div", {"Tensor_mode", "Scalar_mode"}, [](LoweringContext& c) {
    const c10::IValue& mode = c.arg(2);
    bool low = low_precision(c.compute_dtype()).has_value();
    bool one_element = !c.arg(1).isTensor() || c.arg(1).toTensor().numel() == 1;
    bool in_opmath = mode.isNone() ? wide_scalar_operand(c) : low && (mode.toStringRef() == "floor" || one_element);
    Value a = operand(c, 0, in_opmath), b = operand(c, 1, in_opmath);
    if (mode.isNone()) return Values{a / b};
    if (mode.toStringRef() == "floor") return Values{floor_div(c, a, b)};
    Value q = divide(c, a, b);  // integer divide truncates already
    return Values{is_floating(q.type.dtype) ? trunc(c, q) : q};
  }, zero_divisor_checked());
  register_with_variants("floor_divide", {"", "Scalar"}, [](LoweringContext& c) {
    return Values{floor_div(c, c.elementwise_input(0), c.elementwise_input(1))};
  }, zero_divisor_checked());
  register_with_variants("remainder", {"Tensor", "Scalar"}, [](LoweringContext& c) {
    return Values{py_remainder(c, c.elementwise_input(0), c.elementwise_input(1))};
  }, zero_divisor_checked());
  register_lowering({"remainder.Scalar_Tensor", "remainder.Scalar_Tensor_out"}, [](LoweringContext& c) {
    return Values{py_remainder(c, c.elementwise_input(0), c.elementwise_input(1))};
  }, zero_divisor_checked());
  register_with_variants("gcd", {""}, [](LoweringContext& c) { return Values{gcd(c, c.elementwise_input(0), c.elementwise_input(1))}; });
  register_with_variants("lcm", {""}, [](LoweringContext& c) { return Values{lcm(c, c.elementwise_input(0), c.elementwise_input(1))}; });
  register_with_variants("fmod", {"Tensor", "Scalar"}, [](LoweringContext& c) {
    return Values{remainder(c, c.elementwise_input(0), c.elementwise_input(1))};
  }, zero_divisor_checked());
  register_with_variants("pow", {"Tensor_Tensor"}, power);
  register_with_variants("pow", {"Tensor_Scalar"}, power, with_meta(pow_scalar_meta));
  register_lowering({"pow.Scalar", "pow.Scalar_out"}, power);
  register_with_variants("maximum", {""}, nan_propagating(BinaryOp::kMaximum));
  register_with_variants("minimum", {""}, nan_propagating(BinaryOp::kMinimum));
  register_with_variants("fmax", {""}, [](LoweringContext& c) {
    Value a = c.elementwise_input(0), b = c.elementwise_input(1);
    Value m = c.b.binary(BinaryOp::kMaximum, a, b);
    return Values{c.b.select(is_nan(a), b, c.b.select(is_nan(b), a, m))};
  });
  register_with_variants("fmin", {""}, [](LoweringContext& c) {
    Value a = c.elementwise_input(0), b = c.elementwise_input(1);
    Value m = c.b.binary(BinaryOp::kMinimum, a, b);
    return Values{c.b.select(is_nan(a), b, c.b.select(is_nan(b), a, m))};
  });
  // atan2(±0, ±0) spelled out: XLA's constant folding gives NaN for it (a lazy window of constants).
  register_with_variants("atan2", {""}, [](LoweringContext& c) {
    Value y = c.elementwise_input(0), x = c.elementwise_input(1);
    Value both_zero = c.b.binary(BinaryOp::kAnd, c.b.compare(Compare::kEQ, y, c.full(0, y)),
                                 c.b.compare(Compare::kEQ, x, c.full(0, x)));
    Value pi = c.b.select(is_negative(c, y), c.full(-M_PI, y), c.full(M_PI, y));
    return Values{c.b.select(both_zero, c.b.select(is_negative(c, x), pi, y), c.b.binary(BinaryOp::kAtan2, y, x))};
  });
  // hypot as C's: inf when either side is infinite, even beside NaN; without overflow, in float64
  // for the narrower dtypes (a^2 overflows float32 from 1.8e19 on), float64 itself scaled by the
  // larger magnitude.
  register_with_variants("hypot", {""}, [](LoweringContext& c) {
    Math m{c.b};
    Value x = c.b.unary(UnaryOp::kAbs, c.broadcast_to_output(c.input_as(0, DType::kF64)));
    Value y = c.b.unary(UnaryOp::kAbs, c.broadcast_to_output(c.input_as(1, DType::kF64)));
    Value big = c.b.binary(BinaryOp::kMaximum, x, y), small = c.b.binary(BinaryOp::kMinimum, x, y);
    Value scaled = big * c.b.unary(UnaryOp::kSqrt, m.k(1, big) + m.square(small / big));
    Value h = c.out().dtype == DType::kF64 ? c.b.select(c.b.compare(Compare::kEQ, big, m.k(0, big)), big, scaled)
                                           : c.b.unary(UnaryOp::kSqrt, m.square(x) + m.square(y));
    Value nan = c.b.compare(Compare::kNE, x + y, x + y);  // maximum/minimum drop a NaN
    h = c.b.select(nan, x + y, h);
    Value infinite = c.b.binary(BinaryOp::kOr, c.b.compare(Compare::kEQ, x, m.k(INFINITY, x)),
                                c.b.compare(Compare::kEQ, y, m.k(INFINITY, y)));
    return Values{c.b.select(infinite, m.k(INFINITY, h), h)};
  });
  register_with_variants("copysign", {"Tensor", "Scalar"}, [](LoweringContext& c) {
    Value mag = c.b.unary(UnaryOp::kAbs, c.elementwise_input(0)), b = c.elementwise_input(1);
    Value zero = c.full(0, b);
    // -0.0 counts as negative: its reciprocal is -inf.
    Value negative = c.b.binary(
        BinaryOp::kOr, c.b.compare(Compare::kLT, b, zero),
        c.b.compare(Compare::kLT, c.full(1, b) / b, zero));
    return Values{c.b.select(negative, -mag, mag)};
  });
  register_with_variants("ldexp", {"Tensor"}, ldexp);
  register_lowering({"ldexp_"}, ldexp);  // its in-place form has no overload name
  register_with_variants("xlogy", {"Tensor", "Scalar_Other"}, [](LoweringContext& c) {
    Value x = c.elementwise_input(0), y = c.elementwise_input(1);
    Value r = x * c.b.unary(UnaryOp::kLog, y);
    Value zero = c.full(0, x);
    return Values{c.b.select(is_nan(y), y, c.b.select(c.b.compare(Compare::kEQ, x, zero), zero, r))};
  });
  register_with_variants("logaddexp", {""}, [](LoweringContext& c) {
    return Values{is_complex(c.out().dtype) ? complex_log_add_exp(c.b, opmath_b(c, 0), opmath_b(c, 1)) : log_add_exp(c, 1.0)};
  });
  register_with_variants("logaddexp2", {""}, [](LoweringContext& c) { return Values{log_add_exp(c, M_LN2)}; });
  register_with_variants("special_xlog1py", {"", "other_scalar", "self_scalar"}, [](LoweringContext& c) {
    Value x = opmath_b(c, 0), y = opmath_b(c, 1);
    Value r = x * c.b.unary(UnaryOp::kLogPlusOne, y);
    Value zero = c.full(0, x);
    return Values{c.b.select(is_nan(y), y, c.b.select(c.b.compare(Compare::kEQ, x, zero), zero, r))};
  });
  register_with_variants("heaviside", {""}, [](LoweringContext& c) {
    Value x = c.elementwise_input(0);
    Value step = c.b.convert(c.b.compare(Compare::kGT, x, c.full(0, x)), x.type.dtype);
    return Values{c.b.select(c.b.compare(Compare::kEQ, x, c.full(0, x)), c.elementwise_input(1), step)};
  });
  register_with_variants("nextafter", {""}, next_after);
  register_lowering({"complex", "complex.out"}, [](LoweringContext& c) {
    DType part = component_dtype(c.out().dtype);  // float16 parts make complex32, computed in complex64
    return Values{c.b.binary(BinaryOp::kComplex, c.broadcast_to_output(c.input_as(0, part)), c.broadcast_to_output(c.input_as(1, part)))};
  });
  register_lowering({"polar", "polar.out"}, [](LoweringContext& c) {
    Value r = c.broadcast_to_output(c.input_uncast(0)), theta = c.broadcast_to_output(c.input_uncast(1));
    return Values{c.b.binary(BinaryOp::kComplex, r * c.b.unary(UnaryOp::kCosine, theta),
                             r * c.b.unary(UnaryOp::kSine, theta))};
  });

  register_with_variants("bitwise_and", {"Tensor", "Scalar"}, bitwise(BinaryOp::kAnd));
  register_with_variants("bitwise_or", {"Tensor", "Scalar"}, bitwise(BinaryOp::kOr));
  register_with_variants("bitwise_xor", {"Tensor", "Scalar"}, bitwise(BinaryOp::kXor));
  register_with_variants("bitwise_left_shift", {"Tensor"}, bitwise(BinaryOp::kShiftLeft));
  register_with_variants("bitwise_right_shift", {"Tensor"}, right_shift);
  // x << s, x >>= s (Python's operators)
  register_lowering({"__lshift__.Tensor", "__lshift__.Scalar", "__lshift__.Tensor_out", "__lshift__.Scalar_out",
                     "__ilshift__.Tensor", "__ilshift__.Scalar"}, bitwise(BinaryOp::kShiftLeft),
                    with_meta(shift_meta("bitwise_left_shift")));
  register_lowering({"__rshift__.Tensor", "__rshift__.Scalar", "__rshift__.Tensor_out", "__rshift__.Scalar_out",
                     "__irshift__.Tensor", "__irshift__.Scalar"}, right_shift,
                    with_meta(shift_meta("bitwise_right_shift")));
  register_with_variants("logical_and", {""}, logical(BinaryOp::kAnd));
  register_with_variants("logical_or", {""}, logical(BinaryOp::kOr));
  register_with_variants("logical_xor", {""}, logical(BinaryOp::kXor));

  register_with_variants("eq", {"Tensor", "Scalar"}, comparison(Compare::kEQ));
  register_with_variants("ne", {"Tensor", "Scalar"}, comparison(Compare::kNE));
  register_with_variants("lt", {"Tensor", "Scalar"}, comparison(Compare::kLT));
  register_with_variants("le", {"Tensor", "Scalar"}, comparison(Compare::kLE));
  register_with_variants("gt", {"Tensor", "Scalar"}, comparison(Compare::kGT));
  register_with_variants("ge", {"Tensor", "Scalar"}, comparison(Compare::kGE));

  register_lowering({"where.self", "where.self_out"}, [](LoweringContext& c) {
    return Values{c.b.select(truthy(c, 0), c.elementwise_input(1), c.elementwise_input(2))};
  });
  Lowering masked_fill = [](LoweringContext& c) { return Values{c.b.select(truthy(c, 1), c.broadcast_to_output(c.input(2)), c.elementwise_input(0))}; };
  register_lowering({"masked_fill.Scalar", "masked_fill_.Scalar", "masked_fill.Scalar_out"}, masked_fill);
  register_lowering({"masked_fill.Tensor", "masked_fill_.Tensor", "masked_fill.Tensor_out"}, masked_fill,
                    with_meta(masked_fill_meta));
  register_with_variants("clamp", {"", "Tensor"}, [](LoweringContext& c) {
    Value x = c.elementwise_input(0);
    bool clip = clamp_clips_integer_bounds();
    if (c.has(1)) x = nan_extreme(c.b, BinaryOp::kMaximum, x, integer_bound(c, 1, clip));
    if (c.has(2)) x = nan_extreme(c.b, BinaryOp::kMinimum, x, integer_bound(c, 2, clip));
    return Values{x};
  }, with_meta(checked_meta([](const std::vector<c10::IValue>& args) {
    TORCH_CHECK(!args[1].isNone() || !args[2].isNone(), "torch.clamp: At least one of 'min' or 'max' must not be None");
    no_complex_bounds(args);
  })));
  auto clamp_one_side = [](BinaryOp op) -> Lowering {
    return [op](LoweringContext& c) {
      return Values{nan_extreme(c.b, op, c.elementwise_input(0), integer_bound(c, 1, clamp_clips_integer_bounds()))};
    };
  };
  register_with_variants("clamp_min", {"", "Tensor"}, clamp_one_side(BinaryOp::kMaximum),
                         with_meta(checked_meta(no_complex_bounds)));
  register_with_variants("clamp_max", {"", "Tensor"}, clamp_one_side(BinaryOp::kMinimum),
                         with_meta(checked_meta(no_complex_bounds)));
  // PyTorch's lerp: weight < 0.5 ? start + w * (end - start) : end - (end - start) * (1 - w).
  register_with_variants("lerp", {"Scalar", "Tensor"}, [](LoweringContext& c) {
    Value start = opmath_b(c, 0), end = opmath_b(c, 1), w = opmath_b(c, 2);
    Value diff = end - start;
    Value low = start + w * diff;
    Value high = end - diff * (c.full(1, w) - w);
    Value w_abs = c.b.unary(UnaryOp::kAbs, w);  // real for a complex weight
    Value small = c.b.compare(Compare::kLT, w_abs, c.full(0.5, w_abs));
    return Values{c.b.select(small, low, high)};
  }, with_meta(checked_meta([](const std::vector<c10::IValue>& args) {
    c10::ScalarType t = args[0].toTensor().scalar_type();
    TORCH_CHECK_NOT_IMPLEMENTED(c10::isFloatingType(t) || c10::isComplexType(t), "\"lerp_kernel_",
                                args[2].isTensor() ? "tensor" : "scalar", "\" not implemented for '", c10::toString(t), "'");
    real_scalar(2)(args);
  })));
  register_lowering({"isin.Tensor_Tensor", "isin.Tensor_Tensor_out", "isin.Tensor_Scalar", "isin.Tensor_Scalar_out",
                     "isin.Scalar_Tensor", "isin.Scalar_Tensor_out"}, isin,
                    padded({}, padding_of_args({0})));  // the elements, not what they are looked up in
  register_with_variants("addcmul", {""}, add_scaled(BinaryOp::kMultiply), with_meta(checked_meta(real_scalar(3))));
  register_with_variants("addcdiv", {""}, add_scaled(BinaryOp::kDivide), with_meta(checked_meta(real_scalar(3))));
}

// The dtypes CPU's kernels refuse that PyTorch's meta kernels let through (aten/dtype_support.h),
// measured against CPU PyTorch 2.11.
TORCHTPU_LOWERINGS(binary_cpu_refusals) {
  refuse_on_cpu("maximum", refused_type_error("maximum not implemented for complex tensors."));
  refuse_on_cpu("minimum", refused_type_error("minimum not implemented for complex tensors."));
  refuse_on_cpu("fmax", refused_type_error("fmax not implemented for complex tensors."));
  refuse_on_cpu("fmin", refused_type_error("fmin not implemented for complex tensors."));
  refuse_on_cpu("clamp", {Refused::kBool, "clamp_scalar_cpu", nullptr, false, "", true});
  refuse_on_cpu("clamp_min", {Refused::kBool, "clamp_min_scalar_cpu", nullptr, false, "", true});
  refuse_on_cpu("clamp_max", {Refused::kBool, "clamp_max_scalar_cpu", nullptr, false, "", true});
  refuse_on_cpu("addcmul", {Refused::kBool, "addcmul_cpu_out"});
  refuse_on_cpu("logaddexp2", {Refused::kComplex, "logaddexp2_cpu"});
  // Judged on the dtype the arguments promote to: bools ** 2.0 computes in float, hypot of an
  // int8 and an int64 tensor is refused in int64.
  refuse_on_cpu("pow", {Refused::kBool, "pow", nullptr, false, "Tensor_Tensor", false, true});
  refuse_on_cpu("atan2", refused_promoted(Refused::kComplex, "atan2_cpu"));
  refuse_on_cpu("xlogy", refused_promoted(Refused::kComplex, "xlogy_cpu"));
  refuse_on_cpu("hypot", refused_promoted(Refused::kBool, "hypot_cpu"));
  refuse_on_cpu("hypot", refused_promoted(Refused::kInteger, "hypot_cpu"));
  refuse_on_cpu("hypot", refused_promoted(Refused::kComplex, "hypot_cpu"));
  refuse_on_cpu("nextafter", refused_promoted(Refused::kInteger, "nextafter_cpu"));
  // XLA's CPU compiler crashes on a complex remainder: CPU refuses it, as the others here.
  refuse_on_cpu("remainder", refused_promoted(Refused::kComplex, "remainder_cpu"));
  refuse_on_cpu("fmod", refused_promoted(Refused::kComplex, "fmod_cpu"));
  refuse_on_cpu("copysign", refused_promoted(Refused::kComplex, "copysign_cpu"));
  refuse_on_cpu("gcd", refused_promoted(Refused::kComplex, "gcd_cpu"));
  refuse_on_cpu("lcm", refused_promoted(Refused::kComplex, "lcm_cpu"));
  refuse_on_cpu("special_xlog1py", refused_promoted(Refused::kComplex, "xlog1py_cpu"));
  refuse_on_cpu("heaviside", refused_not_implemented("heaviside is not yet implemented for complex tensors."));
  refuse_on_cpu("lt", refused_promoted(Refused::kComplex, "lt_cpu"));
  refuse_on_cpu("le", refused_promoted(Refused::kComplex, "le_cpu"));
  refuse_on_cpu("gt", refused_promoted(Refused::kComplex, "gt_cpu"));
  refuse_on_cpu("ge", refused_promoted(Refused::kComplex, "ge_cpu"));
  refuse_on_cpu("clamp_min", {Refused::kComplex, "maximum_cpu", nullptr, false, "Tensor"});
  refuse_on_cpu("clamp_max", {Refused::kComplex, "minimum_cpu", nullptr, false, "Tensor"});
  // Shifts compute in the promoted dtype: bools << 1 is int64, bools << bools is refused.
  refuse_on_cpu("__lshift__", refused_promoted(Refused::kNotInteger, "lshift_cpu"));
  refuse_on_cpu("__ilshift__", refused_promoted(Refused::kNotInteger, "lshift_cpu"));
  refuse_on_cpu("bitwise_left_shift", refused_promoted(Refused::kNotInteger, "lshift_cpu"));
  refuse_on_cpu("__rshift__", refused_promoted(Refused::kNotInteger, "rshift_cpu"));
  refuse_on_cpu("__irshift__", refused_promoted(Refused::kNotInteger, "rshift_cpu"));
  refuse_on_cpu("bitwise_right_shift", refused_promoted(Refused::kNotInteger, "rshift_cpu"));
  // CPU computes few ops in complex32 (add, sub, mul, neg, conj, abs, cat, fill_, copies, ...);
  // tpu computes every lowered op in complex64 and rounds (as CUDA's chalf kernels), except
  // these, which CPU refuses and PyTorch code meets (foreach ops with a complex Scalar).
  refuse_on_cpu("div", {Refused::kComplexHalf, "div_cpu"});
  refuse_on_cpu("pow", {Refused::kComplexHalf, "pow"});
  // float8: CPU stores, converts, copies, indexes, multiplies and matmuls them, little else.
  refuse_on_cpu("add", {Refused::kFloat8, "add_stub"});
  refuse_on_cpu("sub", {Refused::kFloat8, "add_stub"});
  refuse_on_cpu("div", {Refused::kFloat8, "div_cpu"});
  refuse_on_cpu("clamp", {Refused::kFloat8, "clamp_scalar_cpu"});
  refuse_on_cpu("masked_fill", {Refused::kFloat8, "masked_fill"});
  refuse_on_cpu("gt", {Refused::kFloat8, "gt_cpu"});
  refuse_on_cpu("lt", {Refused::kFloat8, "lt_cpu"});
  refuse_on_cpu("logical_and", {Refused::kComplexHalf, "logical_and_cpu"});
  refuse_on_cpu("logical_or", {Refused::kComplexHalf, "logical_or_cpu"});
  refuse_on_cpu("logical_xor", {Refused::kComplexHalf, "logical_xor_cpu"});
}

}  // namespace torchtpu::aten
