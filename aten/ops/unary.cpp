// Element-wise ops of one operand, activation functions and their backward formulas.
#include <cmath>
#include <limits>
#include <tuple>

#include <ATen/ops/empty_like.h>

#include "aten/lowering.h"
#include "aten/ops/converge.h"

namespace torchtpu::aten {
namespace {

using hlo::Builder;

// Math plus the few extra shorthands activation formulas use.
struct Ops : Math {
  explicit Ops(LoweringContext& c) : Math{c.b} {}
  Value max(const Value& a, const Value& x) { return b.binary(BinaryOp::kMaximum, a, x); }
  Value min(const Value& a, const Value& x) { return b.binary(BinaryOp::kMinimum, a, x); }
  Value u(UnaryOp op, const Value& x) { return b.unary(op, x); }
  Value gt(const Value& a, const Value& x) { return b.compare(Compare::kGT, a, x); }
  Value le(const Value& a, const Value& x) { return b.compare(Compare::kLE, a, x); }
  Value sel(const Value& p, const Value& a, const Value& x) { return b.select(p, a, x); }
  Value sigmoid(const Value& x) { return u(UnaryOp::kLogistic, x); }
};


// Complex inputs keep their type (abs of complex is real: the builder knows); real ones are cast
// to the output dtype first (exp of an int tensor computes in float).
Lowering unary(UnaryOp op) {
  return [op](LoweringContext& c) {
    Value x = c.input_uncast(0);
    return Values{c.b.unary(op, is_complex(x.type.dtype) ? x : opmath(c, 0))};
  };
}

// log of the standard normal CDF, log(erfc(-x / sqrt 2) / 2): as log1p(-erfc(x / sqrt 2) / 2)
// from -1 up (no cancellation where the CDF is near 1), and below where erfc underflows (-10 in
// float32, -30 in float64) through its asymptotic series -x^2/2 - log(-x) - log(2 pi)/2 +
// log(sum_k (-1)^k (2k-1)!! / x^2k), seven terms.
Value log_ndtr(Ops& o, const Value& x) {
  Value z = o.mul(x, o.k(M_SQRT1_2, x));
  Value upper = o.u(UnaryOp::kLogPlusOne, o.mul(o.k(-0.5, x), o.u(UnaryOp::kErfc, z)));
  Value lower = o.u(UnaryOp::kLog, o.mul(o.k(0.5, x), o.u(UnaryOp::kErfc, o.u(UnaryOp::kNegate, z))));
  Value r2 = o.div(o.k(1, x), o.square(x)), series = o.k(0, x);
  for (double c : {10395.0, -945.0, 105.0, -15.0, 3.0, -1.0, 1.0}) series = o.add(o.mul(series, r2), o.k(c, x));
  Value tail = o.sub(o.sub(o.mul(o.k(-0.5, x), o.square(x)), o.u(UnaryOp::kLog, o.u(UnaryOp::kNegate, x))),
                     o.sub(o.k(0.5 * std::log(2 * M_PI), x), o.u(UnaryOp::kLog, series)));
  Value far = o.b.compare(Compare::kLT, x, o.k(x.type.dtype == DType::kF64 ? -30 : -10, x));
  return o.sel(o.b.compare(Compare::kGE, x, o.k(-1, x)), upper, o.sel(far, tail, lower));
}

// exp(x^2), with x^2's rounding error (Dekker's exact split of x * x) folded back in: the error
// of fl(x^2) would otherwise grow the result's relative error with x^2.
Value exp_of_square(Ops& o, const Value& x) {
  Value scaled = o.mul(x, o.k(x.type.dtype == DType::kF64 ? 134217729.0 : 4097.0, x));  // 2^(p/2) + 1
  Value high = o.sub(scaled, o.sub(scaled, x)), low = o.sub(x, high);
  Value square = o.mul(x, x);
  Value error = o.add(o.add(o.sub(o.mul(high, high), square), o.mul(o.mul(o.k(2, x), high), low)), o.mul(low, low));
  Value e = o.u(UnaryOp::kExponential, square);
  return o.sel(o.u(UnaryOp::kIsFinite, e), o.mul(e, o.add(o.k(1, x), error)), e);  // inf beyond: no correction
}

// erfcx(x) = exp(x^2) erfc(x): that product below |x| = 2; from 2 on, erfc's continued fraction
// 1 / sqrt(pi) / (x + (1/2) / (x + 1 / (x + (3/2) / (x + ...)))) by Lentz's method until it
// converges; for negative x, 2 exp(x^2) - erfcx(-x) (overflowing to inf as on CPU).
Value erfcx(Ops& o, const Value& x) {
  Builder& b = o.b;
  Value ax = o.u(UnaryOp::kAbs, x), near = o.b.compare(Compare::kLT, ax, o.k(2, ax));
  Value product = o.mul(exp_of_square(o, ax), o.u(UnaryOp::kErfc, ax));
  Value z = o.sel(near, o.k(2, ax), ax);  // keeps the unused lanes finite
  Value use = b.binary(BinaryOp::kAnd, b.unary(UnaryOp::kNot, near), b.unary(UnaryOp::kIsFinite, x));
  double tiny = x.type.dtype == DType::kF64 ? 1e-300 : 1e-30;
  Values cf = converge(b, {z, z, z, o.k(0, z), o.k(0, z)}, use, [tiny](Math& m, const Values& s) {  // (z, f, C, D, k)
    auto not_tiny = [&](const Value& v) {
      return m.b.select(m.b.compare(Compare::kLT, m.b.unary(UnaryOp::kAbs, v), m.k(tiny, v)), m.k(tiny, v), v);
    };
    Value k = s[4] + m.k(1, s[4]), a = k * m.k(0.5, k);
    Value d = m.k(1, s[0]) / not_tiny(s[0] + a * s[3]);
    Value c = not_tiny(s[0] + a / s[2]);
    Value delta = c * d;
    return Values{s[0], s[1] * delta, c, d, k, m.b.unary(UnaryOp::kAbs, delta - m.k(1, delta))};
  });
  Value fraction = o.div(o.k(1, z), o.mul(cf[1], o.k(std::sqrt(M_PI), z)));
  // From 1e9 on (and at inf) the fraction's first term, 1 / (x sqrt(pi)), is exact to 1e-18; the
  // iteration's x * x terms would overflow.
  Value first_term = o.div(o.k(1 / std::sqrt(M_PI), ax), ax);
  Value positive = o.sel(near, product, o.sel(o.gt(ax, o.k(1e9, ax)), first_term, fraction));
  Value negative = o.sub(o.mul(o.k(2, x), exp_of_square(o, ax)), positive);
  return o.sel(o.b.compare(Compare::kLT, x, o.k(0, x)), negative, positive);
}

// sign(x) as CPU's and CUDA's (0 < x) - (x < 0): NaN and -0.0 give 0. Complex numbers: x / |x|.
Values sign(LoweringContext& c) {
  Value x = c.input_uncast(0);
  if (is_complex(x.type.dtype)) return {c.b.unary(UnaryOp::kSign, x)};
  if (x.type.dtype == DType::kBool) return {x};
  Value r = opmath(c, 0), zero = c.b.constant(0, r.type);
  auto indicator = [&](const Value& p) { return c.b.convert(p, r.type.dtype); };
  return {indicator(c.b.compare(Compare::kGT, r, zero)) - indicator(c.b.compare(Compare::kLT, r, zero))};
}

// erf; in float32 XLA's approximation stops 3 ulps short of +-1 (0.99999982 from |x| = 3.9 on,
// which 1 + erf(x), as in special.ndtr, turns into 9e-8 at -inf): from where erf(x) rounds to +-1
// (|x| > 3.9192), +-1.
Values erf(LoweringContext& c) {
  Ops o(c);
  Value x = opmath(c, 0), e = o.u(UnaryOp::kErf, x);
  if (x.type.dtype != DType::kF32) return {e};
  Value one = o.sel(o.b.compare(Compare::kLT, x, o.k(0, x)), o.k(-1, x), o.k(1, x));
  return {o.sel(o.b.compare(Compare::kGT, o.u(UnaryOp::kAbs, x), o.k(3.9192, x)), one, e)};
}

// frexp(x) -> (mantissa, exponent) with x = mantissa 2^exponent, 0.5 <= |mantissa| < 1 (0, inf
// and NaN give themselves and 0), all on the bits: the exponent field gives the power and the
// mantissa keeps x's sign and fraction under the exponent of 0.5. A subnormal's leading fraction
// bit becomes the implicit one (integer ops only: XLA flushes subnormal arithmetic to zero).
Values frexp(LoweringContext& c) {
  Builder& b = c.b;
  Value x = c.input_uncast(0);
  DType t = x.type.dtype;
  FloatFormat f = float_format(t);
  hlo::TensorType int_type{f.bits, x.type.dims};
  auto i = [&](int64_t v) { return b.constant_int(v, int_type); };
  auto op = [&](BinaryOp o, const Value& p, const Value& q) { return b.binary(o, p, q); };
  auto eq = [&](const Value& p, const Value& q) { return b.compare(Compare::kEQ, p, q); };
  int64_t exponent_mask = (int64_t{1} << (f.width - 1 - f.fraction)) - 1, fraction_mask = (int64_t{1} << f.fraction) - 1;
  Value bits = b.bitcast_convert(x, f.bits);
  Value field = op(BinaryOp::kAnd, op(BinaryOp::kShiftRightLogical, bits, i(f.fraction)), i(exponent_mask));
  Value fraction = op(BinaryOp::kAnd, bits, i(fraction_mask));
  Value sign = op(BinaryOp::kAnd, bits, i(std::numeric_limits<int64_t>::min() >> (64 - f.width)));
  Value lead = op(BinaryOp::kSubtract, i(f.width - 1), b.unary(UnaryOp::kCountLeadingZeros, fraction));
  Value subnormal = eq(field, i(0));
  Value normalized = op(BinaryOp::kAnd, op(BinaryOp::kShiftLeft, fraction, op(BinaryOp::kSubtract, i(f.fraction), lead)),
                        i(fraction_mask));
  Value exponent = b.select(subnormal, op(BinaryOp::kSubtract, lead, i(f.fraction - 2 + f.bias)),
                            op(BinaryOp::kSubtract, field, i(f.bias - 1)));
  Value mantissa_bits = op(BinaryOp::kOr, op(BinaryOp::kOr, sign, i((f.bias - 1) << f.fraction)),
                           b.select(subnormal, normalized, fraction));
  Value special = op(BinaryOp::kOr, op(BinaryOp::kAnd, subnormal, eq(fraction, i(0))), eq(field, i(exponent_mask)));
  return {b.select(special, x, b.bitcast_convert(mantissa_bits, t)), b.convert(b.select(special, i(0), exponent), DType::kS32)};
}

// The Hurwitz zeta function sum_k (q + k)^-s, as CPU's Cephes loop computes it. XLA's zeta sums
// nine terms before its asymptotic tail, which is accurate for q > 0 only; CPU keeps summing until
// q + k > 9. So a q <= 0 is first moved up by kShift terms: zeta(s, q) = sum_{k < kShift}
// (q + k)^-s + zeta(s, q + kShift) (a pole, q a non-positive integer, gives inf as on CPU).
Value hurwitz_zeta(Ops& o, const Value& s, const Value& q) {
  constexpr int kShift = 32;
  Value negative = o.le(q, o.k(0, q));
  Value partial = o.k(0, q), minus_s = o.u(UnaryOp::kNegate, s), a = q;
  for (int k = 0; k < kShift; ++k) {  // a = q + k by repeated increments, rounded as CPU's loop
    partial = o.add(partial, o.b.binary(BinaryOp::kPower, a, minus_s));
    a = o.add(a, o.k(1, a));
  }
  Value tail = o.b.binary(BinaryOp::kZeta, s, o.sel(negative, a, q));
  Value sum = o.sel(negative, o.add(partial, tail), tail);
  // XLA's zeta is NaN for s beyond ~1e4 in float32 and ~1e10 in float64. There (q > 0) the first term,
  // q^-s, is the sum to the dtype's precision; at s = inf and q > 1, CPU's Euler-Maclaurin tail
  // computes inf * 0: NaN.
  double large = s.type.dtype == DType::kF64 ? 1e10 : 1000;
  Value first = o.b.binary(BinaryOp::kPower, q, minus_s);
  Value nan_tail = o.b.binary(BinaryOp::kAnd, o.b.compare(Compare::kEQ, s, o.k(INFINITY, s)), o.gt(q, o.k(1, q)));
  Value only_first = o.b.binary(BinaryOp::kAnd, o.b.compare(Compare::kGE, s, o.k(large, s)), o.gt(q, o.k(0, q)));
  sum = o.sel(only_first, o.sel(nan_tail, o.k(NAN, s), first), sum);
  // CPU's checks, in its order (a NaN s beside a pole q gives inf there): inf at s = 1, NaN for
  // s < 1; for q <= 0, inf at an integer q, NaN for a non-integer s.
  auto eq = [&](const Value& l, const Value& r) { return o.b.compare(Compare::kEQ, l, r); };
  Value inf = o.k(INFINITY, s), nan = o.k(NAN, s);
  Value pole = o.b.binary(BinaryOp::kAnd, negative, eq(q, o.u(UnaryOp::kFloor, q)));
  Value fractional_s = o.b.binary(BinaryOp::kAnd, negative, o.b.compare(Compare::kNE, s, o.u(UnaryOp::kFloor, s)));
  sum = o.sel(pole, inf, o.sel(fractional_s, nan, sum));
  return o.sel(eq(s, o.k(1, s)), inf, o.sel(o.gt(o.k(1, s), s), nan, sum));
}

// digamma with CPU's pole at zero: -inf at +0, +inf at -0 (XLA's gives NaN there).
Value digamma(Ops& o, const Value& x) {
  Value pole = o.sel(o.gt(o.k(0, x), o.div(o.k(1, x), x)), o.k(INFINITY, x), o.k(-INFINITY, x));
  return o.sel(o.b.compare(Compare::kEQ, x, o.k(0, x)), pole, o.u(UnaryOp::kDigamma, x));
}

// polygamma(1, x) by CPU's own formula (reflection below 0.5, six recurrence steps, then the
// asymptotic series), which near the poles differs from zeta(2, x) in float32's last digits.
Value trigamma(Ops& o, Value x) {
  Value reflect = o.gt(o.k(0.5, x), x);
  Value sin_pi_x = o.u(UnaryOp::kSine, o.mul(o.k(M_PI, x), x));
  Value result = o.sel(reflect, o.u(UnaryOp::kNegate, o.div(o.k(M_PI * M_PI, x), o.mul(sin_pi_x, sin_pi_x))), o.k(0, x));
  x = o.sel(reflect, o.sub(o.k(1, x), x), x);
  for (int i = 0; i < 6; ++i) {
    result = o.add(result, o.div(o.k(1, x), o.mul(x, x)));
    x = o.add(x, o.k(1, x));
  }
  Value ixx = o.div(o.k(1, x), o.mul(x, x));
  Value series = o.mul(ixx, o.sub(o.k(1.0 / 30, x), o.mul(ixx, o.k(1.0 / 42, x))));
  series = o.add(o.add(o.k(1, x), o.div(o.k(1, x), o.mul(o.k(2, x), x))), o.mul(ixx, o.sub(o.k(1.0 / 6, x), series)));
  result = o.add(result, o.div(series, x));
  return o.sel(reflect, o.u(UnaryOp::kNegate, result), result);
}

// A unary op defined by a formula over Ops.
template <typename F>
Lowering formula(F f) {
  return [f](LoweringContext& c) {
    Ops o(c);
    return Values{f(o, opmath(c, 0))};
  };
}

// Backward ops: (grad, x) -> grad * f'(x).
template <typename F>
Lowering backward(F f) {
  return [f](LoweringContext& c) {
    Ops o(c);
    return Values{f(o, opmath_b(c, 0), opmath_b(c, 1))};
  };
}

constexpr double kSqrt2OverPi = 0.7978845608028654;

// GELU's normal CDF, Phi(x) = erfc(-x / sqrt 2) / 2 (or its tanh approximation, (1 + tanh u) / 2 =
// sigmoid(2u)). Written as 1 + erf (or 1 + tanh) it cancels below x = -3: XLA's float32 erf stops
// short of -1 and GELU(-6.3) came out -6e-7 where it is -7e-10 (CPU, cancelling too, gives -0).
Value tanh_approximation_inner(Ops& o, const Value& x) {  // u = sqrt(2/pi) (x + 0.044715 x^3)
  return o.mul(o.k(kSqrt2OverPi, x), o.add(x, o.mul(o.k(0.044715, x), o.mul(x, o.mul(x, x)))));
}

Value normal_cdf(Ops& o, const Value& x, bool tanh_approx) {
  if (tanh_approx) return o.u(UnaryOp::kLogistic, o.mul(o.k(2, x), tanh_approximation_inner(o, x)));
  return o.mul(o.k(0.5, x), o.u(UnaryOp::kErfc, o.mul(o.k(-M_SQRT1_2, x), x)));
}

Value gelu(Ops& o, const Value& x, bool tanh_approx) { return o.mul(x, normal_cdf(o, x, tanh_approx)); }

Value gelu_grad(Ops& o, const Value& g, const Value& x, bool tanh_approx) {
  if (tanh_approx) {
    // d/dx x sigmoid(2u) = s + x 2u' s (1 - s), with s = sigmoid(2u), 1 - s = sigmoid(-2u)
    Value twice_u = o.mul(o.k(2, x), tanh_approximation_inner(o, x));
    Value s = o.u(UnaryOp::kLogistic, twice_u), rest = o.u(UnaryOp::kLogistic, o.u(UnaryOp::kNegate, twice_u));
    Value dinner = o.mul(o.k(kSqrt2OverPi, x), o.add(o.k(1, x), o.mul(o.k(3 * 0.044715, x), o.mul(x, x))));
    Value right = o.mul(o.mul(o.k(2, x), x), o.mul(o.mul(s, rest), dinner));
    return o.mul(g, o.add(s, right));
  }
  Value cdf = normal_cdf(o, x, false);
  Value pdf = o.mul(o.k(1 / std::sqrt(2 * M_PI), x),
                    o.u(UnaryOp::kExponential, o.mul(o.k(-0.5, x), o.mul(x, x))));
  return o.mul(g, o.add(cdf, o.mul(x, pdf)));
}

// |x| <= lambd, the band hardshrink and softshrink zero (false for NaN).
Value inside_band(Ops& o, const Value& x, const Value& lambd) {
  return o.b.binary(BinaryOp::kAnd, o.b.compare(Compare::kGE, x, o.u(UnaryOp::kNegate, lambd)), o.le(x, lambd));
}

bool tanh_approximation(LoweringContext& c, size_t i) {
  return c.arg(i).isString() && c.arg(i).toStringRef() == "tanh";
}

}  // namespace

TORCHTPU_LOWERINGS(unary) {
  PaddedFamily elementwise(pointwise_padding());  // every op here runs padded where sizes vary
  struct Entry {
    const char* name;
    UnaryOp op;
  };
  for (Entry e : {Entry{"abs", UnaryOp::kAbs}, {"neg", UnaryOp::kNegate}, {"exp", UnaryOp::kExponential},
                  {"expm1", UnaryOp::kExponentialMinusOne}, {"log", UnaryOp::kLog},
                  {"log1p", UnaryOp::kLogPlusOne}, {"sqrt", UnaryOp::kSqrt}, {"rsqrt", UnaryOp::kRsqrt},
                  {"sin", UnaryOp::kSine}, {"cos", UnaryOp::kCosine}, {"tan", UnaryOp::kTan},
                  {"tanh", UnaryOp::kTanh}, {"asin", UnaryOp::kAsin}, {"acos", UnaryOp::kAcos},
                  {"atan", UnaryOp::kAtan}, {"sinh", UnaryOp::kSinh}, {"cosh", UnaryOp::kCosh},
                  {"asinh", UnaryOp::kAsinh}, {"acosh", UnaryOp::kAcosh}, {"atanh", UnaryOp::kAtanh},
                  {"sigmoid", UnaryOp::kLogistic}, {"erfc", UnaryOp::kErfc},
                  {"erfinv", UnaryOp::kErfInv}, {"lgamma", UnaryOp::kLgamma},
                  {"ceil", UnaryOp::kCeil}, {"floor", UnaryOp::kFloor},
                  {"round", UnaryOp::kRoundNearestEven}, {"bitwise_not", UnaryOp::kNot}})
    register_with_variants(e.name, {""}, unary(e.op));

  register_with_variants("sign", {""}, sign);
  register_with_variants("erf", {""}, erf);
  register_with_variants("sgn", {""}, sign);
  register_with_variants("trunc", {""}, formula([](Ops& o, const Value& x) {
    return o.sel(o.gt(x, o.k(0, x)), o.u(UnaryOp::kFloor, x), o.u(UnaryOp::kCeil, x));
  }));
  register_with_variants("frac", {""}, formula([](Ops& o, const Value& x) {
    return o.sub(x, o.sel(o.gt(x, o.k(0, x)), o.u(UnaryOp::kFloor, x), o.u(UnaryOp::kCeil, x)));
  }));
  register_with_variants("reciprocal", {""}, formula([](Ops& o, const Value& x) { return o.div(o.k(1, x), x); }));
  register_with_variants("exp2", {""}, formula([](Ops& o, const Value& x) {
    return o.u(UnaryOp::kExponential, o.mul(x, o.k(M_LN2, x)));
  }));
  register_with_variants("log2", {""}, formula([](Ops& o, const Value& x) {
    return o.div(o.u(UnaryOp::kLog, x), o.k(M_LN2, x));
  }));
  register_with_variants("log10", {""}, formula([](Ops& o, const Value& x) {
    return o.div(o.u(UnaryOp::kLog, x), o.k(M_LN10, x));
  }));
  register_with_variants("relu", {""}, formula([](Ops& o, const Value& x) { return o.max(x, o.k(0, x)); }));
  register_with_variants("silu", {""}, formula([](Ops& o, const Value& x) { return o.mul(x, o.sigmoid(x)); }));
  register_with_variants("mish", {""}, formula([](Ops& o, const Value& x) {
    Value sp = o.u(UnaryOp::kLogPlusOne, o.u(UnaryOp::kExponential, x));
    return o.mul(x, o.u(UnaryOp::kTanh, sp));
  }));
  register_with_variants("hardsigmoid", {""}, formula([](Ops& o, const Value& x) {
    return o.div(o.min(o.max(o.add(x, o.k(3, x)), o.k(0, x)), o.k(6, x)), o.k(6, x));
  }));
  register_with_variants("hardswish", {""}, formula([](Ops& o, const Value& x) {
    return o.mul(x, o.div(o.min(o.max(o.add(x, o.k(3, x)), o.k(0, x)), o.k(6, x)), o.k(6, x)));
  }));
  register_lowering({"hardswish_backward", "hardswish_backward.out"}, backward([](Ops& o, const Value& g, const Value& x) {
    Value slope = o.add(o.div(x, o.k(3, x)), o.k(0.5, x));
    Value below = o.le(x, o.k(-3, x)), inside = o.b.compare(Compare::kLT, x, o.k(3, x));
    return o.sel(below, o.k(0, x), o.sel(inside, o.mul(g, slope), g));
  }));
  register_lowering({"hardsigmoid_backward", "hardsigmoid_backward.grad_input"}, backward([](Ops& o, const Value& g, const Value& x) {
    Value inside = o.b.binary(BinaryOp::kAnd, o.gt(x, o.k(-3, x)), o.b.compare(Compare::kLT, x, o.k(3, x)));
    return o.sel(inside, o.div(g, o.k(6, x)), o.k(0, x));
  }));
  register_lowering({"logical_not", "logical_not_", "logical_not.out"}, [](LoweringContext& c) {
    Value x = c.input_uncast(0);
    Value truth = x.type.dtype == DType::kBool ? x : c.b.compare(Compare::kNE, x, c.full(0, x));
    return Values{c.b.unary(UnaryOp::kNot, truth)};
  });
  LoweringOptions same_as_input;  // _conj_physical has no meta kernel
  same_as_input.meta = [](const c10::FunctionSchema& schema, const std::vector<c10::IValue>& args) {
    if (schema.returns().empty() || schema.returns()[0].alias_info()) return std::vector<c10::IValue>{args[0]};
    return std::vector<c10::IValue>{at::empty_like(args[0].toTensor())};
  };
  register_lowering({"_conj_physical", "conj_physical_", "conj_physical.out", "_conj_physical.out"},
                    [](LoweringContext& c) {
                      Value x = c.input(0);
                      if (!is_complex(x.type.dtype)) return Values{x};
                      Value re = c.b.unary(UnaryOp::kReal, x), im = c.b.unary(UnaryOp::kImag, x);
                      return Values{c.b.binary(BinaryOp::kComplex, re, -im)};
                    },
                    same_as_input);
  register_lowering({"isnan", "isnan.out"}, [](LoweringContext& c) {
    Value x = c.input_uncast(0);
    return Values{is_nan(x)};
  });
  for (auto [name, out, sign] : {std::tuple{"isinf", "isinf.out", 0}, {"isposinf", "isposinf.out", 1},
                                 {"isneginf", "isneginf.out", -1}}) {
    register_lowering({name, out}, [sign = sign](LoweringContext& c) {
      Value x = c.input_uncast(0);
      if (!is_floating(x.type.dtype)) return Values{c.b.constant(0, {DType::kBool, x.type.dims})};
      Value pos = c.b.compare(Compare::kEQ, x, c.full(INFINITY, x));
      Value neg = c.b.compare(Compare::kEQ, x, c.full(-INFINITY, x));
      return Values{sign > 0 ? pos : sign < 0 ? neg : c.b.binary(BinaryOp::kOr, pos, neg)};
    });
  }
  register_lowering({"gelu", "gelu_", "gelu.out"}, [](LoweringContext& c) {
    Ops o(c);
    return Values{gelu(o, opmath(c, 0), tanh_approximation(c, 1))};
  });
  register_lowering({"gelu_backward", "gelu_backward.grad_input"}, [](LoweringContext& c) {
    Ops o(c);
    return Values{gelu_grad(o, opmath_b(c, 0), opmath_b(c, 1), tanh_approximation(c, 2))};
  });
  register_lowering({"hardtanh", "hardtanh_", "hardtanh.out"}, [](LoweringContext& c) {
    Ops o(c);
    // Integer bounds clipped to the dtype's range in every version: before 2.15, CPU raised for
    // those beyond it (and for an unsigned dtype's negative ones).
    return Values{o.min(o.max(c.input(0), integer_bound(c, 1, true)), integer_bound(c, 2, true))};
  });
  // the slope in opmath, not rounded to bfloat16/float16 first, as CPU's and CUDA's kernels
  register_lowering({"leaky_relu", "leaky_relu_", "leaky_relu.out"}, [](LoweringContext& c) {
    Ops o(c);
    Value x = opmath(c, 0);
    return Values{o.sel(o.gt(x, o.k(0, x)), x, x * opmath_b(c, 1))};
  });
  register_lowering({"elu", "elu_", "elu.out"}, [](LoweringContext& c) {
    Ops o(c);  // elu(x, alpha, scale, input_scale)
    Value x = opmath(c, 0);
    Value neg = opmath_b(c, 1) * o.u(UnaryOp::kExponentialMinusOne, x * opmath_b(c, 3));
    return Values{opmath_b(c, 2) * o.sel(o.gt(x, o.k(0, x)), x, neg)};
  });
  register_lowering({"softplus", "softplus.out"}, [](LoweringContext& c) {
    Ops o(c);  // softplus(x, beta, threshold)
    Value x = opmath(c, 0), beta = opmath_b(c, 1), threshold = opmath_b(c, 2);
    Value bx = x * beta;
    Value soft = o.u(UnaryOp::kLogPlusOne, o.u(UnaryOp::kExponential, bx)) / beta;
    return Values{o.sel(o.gt(bx, threshold), x, soft)};
  });
  register_lowering({"nan_to_num", "nan_to_num_", "nan_to_num.out"}, [](LoweringContext& c) {
    Ops o(c);
    Value x = c.input(0);
    if (!is_floating(x.type.dtype)) return Values{x};
    double big = x.type.dtype == DType::kF64 ? 1.7976931348623157e308
                 : x.type.dtype == DType::kF32 ? 3.4028234663852886e38
                 : x.type.dtype == DType::kBF16 ? 3.3895313892515355e38 : 65504.0;
    auto opt = [&](size_t i, double dflt) {
      return c.arg(i).isNone() ? o.k(dflt, x) : o.k(c.arg(i).toDouble(), x);
    };
    Value nan = is_nan(x);
    Value posinf = c.b.compare(Compare::kEQ, x, o.k(INFINITY, x));
    Value neginf = c.b.compare(Compare::kEQ, x, o.k(-INFINITY, x));
    return Values{o.sel(nan, opt(1, 0), o.sel(posinf, opt(2, big), o.sel(neginf, opt(3, -big), x)))};
  });

  // Backward formulas.
  register_lowering({"threshold_backward", "threshold_backward.grad_input"}, [](LoweringContext& c) {
    Ops o(c);  // (grad, self, threshold): grad where self > threshold
    Value g = c.elementwise_input(0), x = c.elementwise_input(1);
    return Values{o.sel(o.le(x, c.broadcast_to_output(c.input(2))), o.k(0, g), g)};
  });
  register_lowering({"threshold", "threshold_", "threshold.out"}, [](LoweringContext& c) {
    Ops o(c);  // (self, threshold, value)
    Value x = c.input(0);
    return Values{o.sel(o.le(x, c.broadcast_to_output(c.input(1))), c.broadcast_to_output(c.input(2)), x)};
  });
  register_lowering({"sigmoid_backward", "sigmoid_backward.grad_input"},
                    backward([](Ops& o, const Value& g, const Value& y) {
                      return o.mul(g, o.mul(y, o.sub(o.k(1, y), y)));
                    }));
  register_lowering({"tanh_backward", "tanh_backward.grad_input"},
                    backward([](Ops& o, const Value& g, const Value& y) {
                      return o.mul(g, o.sub(o.k(1, y), o.mul(y, y)));
                    }));
  register_lowering({"silu_backward", "silu_backward.grad_input"},
                    backward([](Ops& o, const Value& g, const Value& x) {
                      Value s = o.sigmoid(x);
                      return o.mul(g, o.mul(s, o.add(o.k(1, x), o.mul(x, o.sub(o.k(1, x), s)))));
                    }));
  register_lowering({"hardtanh_backward", "hardtanh_backward.grad_input"}, [](LoweringContext& c) {
    Ops o(c);
    Value g = c.elementwise_input(0), x = c.elementwise_input(1);
    Value inside = c.b.binary(BinaryOp::kAnd, o.gt(x, c.broadcast_to_output(c.input(2))),
                              c.b.compare(Compare::kLT, x, c.broadcast_to_output(c.input(3))));
    return Values{o.sel(inside, g, o.k(0, g))};
  });
  // elu_backward(grad, alpha, scale, input_scale, is_result, self_or_result): from the result
  // (in-place elu) or the input, as PyTorch's kernel.
  register_lowering({"elu_backward", "elu_backward.grad_input"}, [](LoweringContext& c) {
    Ops o(c);
    Value g = opmath_b(c, 0), x = opmath_b(c, 5);
    Value alpha = opmath_b(c, 1), scale = opmath_b(c, 2), input_scale = opmath_b(c, 3);
    Value negative = c.arg(4).toBool()
                         ? input_scale * (x + alpha * scale)
                         : input_scale * (alpha * scale) * o.u(UnaryOp::kExponential, x * input_scale);
    return Values{g * o.sel(o.le(x, o.k(0, x)), negative, scale)};
  });
  register_lowering({"softplus_backward", "softplus_backward.grad_input"}, [](LoweringContext& c) {
    Ops o(c);  // (grad, self, beta, threshold)
    Value g = opmath_b(c, 0), x = opmath_b(c, 1);
    Value bx = x * opmath_b(c, 2);
    Value z = o.u(UnaryOp::kExponential, bx);
    return Values{o.sel(o.gt(bx, opmath_b(c, 3)), g, g * z / (z + o.k(1, z)))};
  });
  // hardshrink / softshrink zero [-lambd, lambd]; NaN passes through both.
  register_lowering({"hardshrink", "hardshrink.out"}, [](LoweringContext& c) {
    Ops o(c);
    Value x = c.input(0);
    return Values{o.sel(inside_band(o, x, c.broadcast_to_output(c.input(1))), o.k(0, x), x)};
  });
  register_lowering({"hardshrink_backward", "hardshrink_backward.grad_input", "softshrink_backward",
                     "softshrink_backward.grad_input"}, [](LoweringContext& c) {
    Ops o(c);
    Value g = c.elementwise_input(0), x = c.elementwise_input(1);
    return Values{o.sel(inside_band(o, x, c.broadcast_to_output(c.input(2))), o.k(0, g), g)};
  });
  register_lowering({"softshrink", "softshrink.out"}, [](LoweringContext& c) {
    Ops o(c);
    Value x = opmath(c, 0), l = opmath_b(c, 1);
    Value below = o.b.compare(Compare::kLT, x, o.u(UnaryOp::kNegate, l));
    return Values{o.sel(o.gt(x, l), x - l, o.sel(below, x + l, x * o.k(0, x)))};
  });
  // logit(x, eps): log(z / (1 - z)) with z = x clamped to [eps, 1 - eps] when eps is given, as
  // CPU does: x < eps gives eps, else x > 1 - eps gives 1 - eps (with eps > 0.5 the bounds cross,
  // and the order decides). CPU computes a bfloat16/float16 logit in the dtype: eps, 1 - z and
  // the quotient are rounded to it.
  register_lowering({"logit", "logit_", "logit.out"}, [](LoweringContext& c) {
    Ops o(c);
    o.rounding = low_precision(c.out().dtype);
    Value z = opmath(c, 0);
    if (!c.arg(1).isNone()) {
      Value lo = o.k(c.arg(1).toDouble(), z), hi = o.k(1 - c.arg(1).toDouble(), z);
      z = o.sel(o.b.compare(Compare::kLT, z, lo), lo, o.sel(o.gt(z, hi), hi, z));
    }
    return Values{o.u(UnaryOp::kLog, o.div(z, o.sub(o.k(1, z), z)))};
  });
  // Outside [0, 1] (or [eps, 1 - eps]) the gradient is NaN (0 with eps), as PyTorch's kernel.
  register_lowering({"logit_backward", "logit_backward.grad_input"}, [](LoweringContext& c) {
    Ops o(c);
    Value g = opmath_b(c, 0), x = opmath_b(c, 1);
    bool has_eps = !c.arg(2).isNone();
    double lo = has_eps ? c.arg(2).toDouble() : 0;
    Value outside = o.b.binary(BinaryOp::kOr, o.b.compare(Compare::kLT, x, o.k(lo, x)), o.gt(x, o.k(1 - lo, x)));
    Value grad = g / (x * (o.k(1, x) - x));
    return Values{o.sel(outside, o.k(has_eps ? 0 : NAN, x), grad)};
  });
  register_with_variants("sinc", {""}, formula([](Ops& o, const Value& x) {
    Value px = o.mul(x, o.k(M_PI, x));
    Value zero = o.b.compare(Compare::kEQ, x, o.k(0, x));
    return o.sel(zero, o.k(1, x), o.div(o.u(UnaryOp::kSine, px), px));
  }));
  register_with_variants("digamma", {""}, formula([](Ops& o, const Value& x) { return digamma(o, x); }));
  register_with_variants("special_zeta", {"", "other_scalar", "self_scalar"}, [](LoweringContext& c) {
    Ops o(c);
    return Values{hurwitz_zeta(o, opmath_b(c, 0), opmath_b(c, 1))};
  });
  // polygamma(n, x) (x first in polygamma_) = (-1)^(n+1) n! zeta(n + 1, x) for n >= 1; n is an int,
  // part of the program.
  register_with_variants("polygamma", {""}, [](LoweringContext& c) {
    Ops o(c);
    bool self_first = c.arg(1).isInt();
    Value x = opmath(c, self_first ? 0 : 1);
    int64_t n = c.arg(self_first ? 1 : 0).toInt();
    if (n == 0) return Values{digamma(o, x)};
    if (n == 1) return Values{trigamma(o, x)};
    double factorial = std::tgamma(static_cast<double>(n) + 1);
    return Values{o.k(n % 2 == 1 ? factorial : -factorial, x) * hurwitz_zeta(o, o.k(static_cast<double>(n + 1), x), x)};
  });
  // the standard normal quantile: sqrt(2) erfinv(2p - 1)
  register_lowering({"special_ndtri", "special_ndtri.out"}, formula([](Ops& o, const Value& p) {
    return o.mul(o.k(M_SQRT2, p), o.u(UnaryOp::kErfInv, o.sub(o.add(p, p), o.k(1, p))));
  }));
  register_lowering({"special_log_ndtr", "special_log_ndtr.out"}, formula(log_ndtr));
  register_lowering({"special_erfcx", "special_erfcx.out"}, formula(erfcx));
  // angle: atan2(imag, real) of complex numbers; pi for negative reals, else 0 (NaN stays NaN)
  register_with_variants("angle", {""}, [](LoweringContext& c) {
    Ops o(c);
    Value x = c.input_uncast(0);
    if (is_complex(x.type.dtype)) return Values{o.b.binary(BinaryOp::kAtan2, o.u(UnaryOp::kImag, x), o.u(UnaryOp::kReal, x))};
    Value r = opmath(c, 0);
    return Values{o.sel(is_nan(r), r, o.sel(o.b.compare(Compare::kLT, r, o.k(0, r)), o.k(M_PI, r), o.k(0, r)))};
  });
  // sin(x) / x, by its Taylor series below |x| = 1/2 (as CPU), 0 at infinity
  register_lowering({"special_spherical_bessel_j0", "special_spherical_bessel_j0.out"}, formula([](Ops& o, const Value& x) {
    Value x2 = o.square(x), series = o.k(0, x);
    for (double f : {6227020800.0, -39916800.0, 362880.0, -5040.0, 120.0, -6.0, 1.0}) series = o.add(o.mul(series, x2), o.k(1 / f, x));
    Value ax = o.u(UnaryOp::kAbs, x);
    return o.sel(o.b.compare(Compare::kEQ, ax, o.k(INFINITY, x)), o.k(0, x),
                 o.sel(o.b.compare(Compare::kLT, ax, o.k(0.5, x)), series, o.div(o.u(UnaryOp::kSine, x), x)));
  }));
  register_lowering({"frexp.Tensor", "frexp.Tensor_out"}, frexp);
  // round(x, decimals=d): to a multiple of 10^-d, halves to even; like CPU, a negative d divides
  // by 10^-d rather than multiply by its (inexact) inverse
  register_with_variants("round", {"decimals"}, [](LoweringContext& c) {
    Ops o(c);
    Value x = opmath(c, 0);
    int64_t d = c.arg(1).toInt();
    Value p = o.k(std::pow(10.0, static_cast<double>(std::abs(d))), x);
    if (d >= 0) return Values{o.u(UnaryOp::kRoundNearestEven, x * p) / p};
    return Values{o.u(UnaryOp::kRoundNearestEven, x / p) * p};
  });
  register_lowering({"special_entr", "special_entr.out"}, formula([](Ops& o, const Value& x) {
    Value negative = o.b.compare(Compare::kLT, x, o.k(0, x)), zero = o.b.compare(Compare::kEQ, x, o.k(0, x));
    Value h = o.u(UnaryOp::kNegate, o.mul(x, o.u(UnaryOp::kLog, x)));
    return o.sel(negative, o.k(-INFINITY, x), o.sel(zero, o.k(0, x), h));  // NaN stays NaN through h
  }));
  // signbit: the sign bit itself, so -0.0 and -NaN count as negative.
  register_lowering({"signbit", "signbit.out"}, [](LoweringContext& c) {
    Value x = c.input_uncast(0);
    DType t = x.type.dtype;
    if (t == DType::kBool || is_unsigned(t)) return Values{c.b.constant(0, {DType::kBool, x.type.dims})};
    if (is_floating(t)) {
      DType bits = t == DType::kF64 ? DType::kS64 : t == DType::kF32 ? DType::kS32 : DType::kS16;
      x = c.b.bitcast_convert(x, bits);
    }
    return Values{c.b.compare(Compare::kLT, x, c.full(0, x))};
  });
  register_lowering({"leaky_relu_backward", "leaky_relu_backward.grad_input"}, [](LoweringContext& c) {
    Ops o(c);  // (grad, self, negative_slope, self_is_result)
    Value g = opmath_b(c, 0), x = opmath_b(c, 1);
    return Values{o.sel(o.gt(x, o.k(0, x)), g, g * opmath_b(c, 2))};
  });
}

// The dtypes CPU's kernels refuse that PyTorch's meta kernels let through (aten/dtype_support.h),
// measured against CPU PyTorch 2.11.
TORCHTPU_LOWERINGS(unary_cpu_refusals) {
  refuse_on_cpu("abs", {Refused::kBool, "abs_cpu"});
  refuse_on_cpu("ceil", {Refused::kBool, "ceil_vml_cpu"});
  refuse_on_cpu("ceil", {Refused::kComplex, nullptr, "ceil is not supported for complex inputs"});
  refuse_on_cpu("floor", {Refused::kBool, "floor_vml_cpu"});
  refuse_on_cpu("floor", {Refused::kComplex, nullptr, "floor is not supported for complex inputs"});
  refuse_on_cpu("trunc", {Refused::kBool, "trunc_vml_cpu"});
  refuse_on_cpu("trunc", {Refused::kComplex, nullptr, "trunc is not supported for complex inputs"});
  refuse_on_cpu("round", {Refused::kBool, "round_vml_cpu"});
  refuse_on_cpu("round", {Refused::kComplex, "round_vml_cpu"});
  refuse_on_cpu("frac", {Refused::kBool, "frac_cpu"});
  refuse_on_cpu("frac", {Refused::kInteger, "frac_cpu"});
  refuse_on_cpu("frac", {Refused::kComplex, "frac_cpu"});
  refuse_on_cpu("sign", {Refused::kComplex, nullptr, "Unlike NumPy, torch.sign is not intended to support complex numbers. Please use torch.sgn instead."});
  refuse_on_cpu("erf", {Refused::kComplex, "erf_vml_cpu"});
  refuse_on_cpu("erfc", {Refused::kComplex, "erfc_vml_cpu"});
  refuse_on_cpu("lgamma", {Refused::kComplex, "lgamma_vml_cpu"});
  refuse_on_cpu("threshold", {Refused::kBool, "threshold_cpu"});
  // CPU computes few ops in complex32 (add, sub, mul, neg, conj, abs, cat, fill_, copies, ...);
  // tpu computes every lowered op in complex64 and rounds (as CUDA's chalf kernels), except
  // these, which CPU refuses and PyTorch code meets (foreach ops with a complex Scalar).
  refuse_on_cpu("exp", {Refused::kComplexHalf, "exp_vml_cpu"});
  // float8: CPU stores, converts, copies, indexes, multiplies and matmuls them, little else.
  refuse_on_cpu("neg", {Refused::kFloat8, "neg_cpu"});
  refuse_on_cpu("exp", {Refused::kFloat8, "exp_vml_cpu"});
  refuse_on_cpu("relu", {Refused::kFloat8, "clamp_min_scalar_cpu"});
}

}  // namespace torchtpu::aten
