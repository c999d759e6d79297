// The regularized incomplete gamma functions P(a, x) (igamma, special.gammainc) and
// Q(a, x) = 1 - P (igammac, special.gammaincc). Below x = a + 1 the series
// P = e^-x x^a / Gamma(a) sum_n x^n / (a (a+1) ... (a+n)) converges fast; above, Q's continued
// fraction (evaluated by Lentz's method). Each runs in a stablehlo.while until every element
// that uses it has converged (at most kMaxIterations steps); the other is 1 minus it. The prefactor's
// exponent a log x - x - lgamma(a) cancels for large a: float32 results there are good to a few
// 1e-5 (CPU switches to Temme's expansion for a > 20). Edges as CPU's, in its order (below).
// Also the gradient of a standard gamma sample x with respect to its concentration a
// (_standard_gamma_grad: Gamma, Chi2, StudentT rsample), -(dP/da) / (dP/dx), as CPU approximates it.
#include <cmath>

#include "aten/lowering.h"
#include "aten/ops/converge.h"

namespace torchtpu::aten {
namespace {

using hlo::Builder;

// P(a, x) by the series (for x < a + 1), without the prefactor: sum_n x^n / (a (a+1) ... (a+n)).
Value series(Builder& b, const Value& a, const Value& x, const Value& use) {
  Math m{b};
  Value first = m.k(1, a) / a;
  return converge(b, {a, x, first, first, a}, use, [](Math& lm, const Values& s) {  // (a, x, term, sum, a + n)
    Value ap = s[4] + lm.k(1, s[4]);
    Value term = s[2] * (s[1] / ap), sum = s[3] + term;
    return Values{s[0], s[1], term, sum, ap, relative_change(lm, term, sum)};
  })[3];
}

// Q(a, x)'s continued fraction (for x >= a + 1), without the prefactor, by Lentz's method:
// 1 / (x + 1 - a - 1 (1 - a) / (x + 3 - a - 2 (2 - a) / (x + 5 - a - ...))).
Value continued_fraction(Builder& b, const Value& a, const Value& x, const Value& use) {
  Math m{b};
  double tiny = a.type.dtype == DType::kF64 ? 1e-300 : 1e-30;
  Value bn = x - a + m.k(1, x), d = m.k(1, bn) / bn;
  Values out = converge(b, {a, bn, m.k(1 / tiny, x), d, d, m.k(0, x)}, use, [tiny](Math& lm, const Values& s) {
    // (a, b_i, c, d, h, i)
    Value i = s[5] + lm.k(1, s[5]);
    Value an = i * (i - s[0]) * lm.k(-1, i);
    Value bi = s[1] + lm.k(2, s[1]);
    auto not_tiny = [&](const Value& v) {
      return lm.b.select(lm.b.compare(Compare::kLT, lm.b.unary(UnaryOp::kAbs, v), lm.k(tiny, v)), lm.k(tiny, v), v);
    };
    Value d = lm.k(1, bi) / not_tiny(an * s[3] + bi);
    Value c = not_tiny(bi + an / s[2]);
    Value delta = d * c;
    return Values{s[0], bi, c, d, s[4] * delta, i, lm.b.unary(UnaryOp::kAbs, delta - lm.k(1, delta))};
  });
  return out[4];
}

// (P, Q) at (a, x), broadcast and in the compute dtype.
std::pair<Value, Value> incomplete_gamma(Builder& b, const Value& a, const Value& x) {
  Math m{b};
  auto is = [&](Compare dir, const Value& v, double k) { return b.compare(dir, v, m.k(k, v)); };
  auto either = [&](const Value& p, const Value& q) { return b.binary(BinaryOp::kOr, p, q); };
  auto both = [&](const Value& p, const Value& q) { return b.binary(BinaryOp::kAnd, p, q); };
  Value finite = both(b.unary(UnaryOp::kIsFinite, a), b.unary(UnaryOp::kIsFinite, x));
  Value regular = both(finite, both(is(Compare::kGT, a, 0), is(Compare::kGT, x, 0)));
  Value safe_a = b.select(regular, a, m.k(1, a)), safe_x = b.select(regular, x, m.k(1, x));
  Value use_series = is(Compare::kLT, safe_x - safe_a, 1);
  Value prefactor = b.unary(UnaryOp::kExponential,
                            safe_a * b.unary(UnaryOp::kLog, safe_x) - safe_x - b.unary(UnaryOp::kLgamma, safe_a));
  Value p_series = prefactor * series(b, safe_a, safe_x, both(regular, use_series));
  Value q_fraction = prefactor * continued_fraction(b, safe_a, safe_x, both(regular, b.unary(UnaryOp::kNot, use_series)));
  Value p = b.select(use_series, p_series, m.k(1, a) - q_fraction);
  Value q = b.select(use_series, m.k(1, p) - p_series, q_fraction);
  // The edges, checked in CPU's order (so a NaN beside a deciding argument gives CPU's value, not
  // NaN): NaN for a negative argument; at a = 0, P = 1 for x > 0 (else NaN); P = 0 at x = 0; at
  // a = inf, P = 0 (NaN if x = inf too); P = 1 at x = inf. Q takes the complementary values.
  Value nan = m.k(NAN, a);
  auto edges = [&](Value r, double at_zero_x) {
    Value zero_x = m.k(at_zero_x, a), inf_x = m.k(1 - at_zero_x, a);
    Value x_inf = is(Compare::kEQ, x, INFINITY);
    r = b.select(regular, r, nan);
    r = b.select(x_inf, inf_x, r);
    r = b.select(is(Compare::kEQ, a, INFINITY), b.select(x_inf, nan, zero_x), r);
    r = b.select(is(Compare::kEQ, x, 0), zero_x, r);
    r = b.select(is(Compare::kEQ, a, 0), b.select(is(Compare::kGT, x, 0), inf_x, nan), r);
    return b.select(either(is(Compare::kLT, a, 0), is(Compare::kLT, x, 0)), nan, r);
  };
  p = edges(p, 0);
  q = edges(q, 1);
  return {p, q};
}

Lowering igamma(bool upper) {
  return [upper](LoweringContext& c) {
    DType t = accumulator(c.out().dtype);
    auto [p, q] = incomplete_gamma(c.b, c.broadcast_to_output(c.input_as(0, t)), c.broadcast_to_output(c.input_as(1, t)));
    return Values{cast(c.b, upper ? q : p, c.out().dtype)};
  };
}

// dx/da of a standard gamma sample x, in three regimes as CPU's kernel (Jankowiak & Obermeyer,
// "Pathwise derivatives beyond the reparameterization trick", 2018), each computed everywhere and
// selected: a six-term Taylor series of P for x < 0.8, Rice's saddle-point expansion for a > 8,
// otherwise a rational function of log(x / a) and log(a) fitted in that paper.
Value gamma_sample_grad(Builder& b, const Value& a, const Value& x) {
  Math m{b};
  auto log = [&](const Value& v) { return b.unary(UnaryOp::kLog, v); };
  auto pow = [&](const Value& v, const Value& e) { return b.binary(BinaryOp::kPower, v, e); };
  auto sqrt = [&](const Value& v) { return b.unary(UnaryOp::kSqrt, v); };
  auto k = [&](double v) { return m.k(v, a); };

  // Small x: P(a, x) = x^a sum_i (-x)^i / (i! (a + i)); its a-derivative takes the squares.
  Value term = k(1), denom = a, series = k(1) / a, series_sq = k(1) / (a * a);
  for (int i = 1; i <= 5; ++i) {
    term = term * ((-x) / k(i));
    denom = denom + k(1);
    series = series + term / denom;
    series_sq = series_sq + term / (denom * denom);
  }
  Value x_pow_a = pow(x, a);
  Value pdf = pow(x, a - k(1)) * b.unary(UnaryOp::kExponential, -x);
  Value cdf_da = (log(x) - b.unary(UnaryOp::kDigamma, a)) * (x_pow_a * series) - x_pow_a * series_sq;
  Value small = -cdf_da / pdf;
  small = b.select(is_nan(small), k(0), small);

  // Large a, x near a: a polynomial; away from it, the saddle-point terms.
  Value numer1 = k(1) + k(24) * a * (k(1) + k(12) * a);
  Value numer2 = k(1440) * (a * a) + k(6) * x * (k(53) - k(120) * x) - k(65) * (x * x) / a + a * (k(107) + k(3600) * x);
  Value near = numer1 * numer2 / (k(1244160) * (a * a * (a * a)));
  Value root = sqrt(k(8) * a), log_ratio = log(x / a);
  Value term2 = root / (a - x);
  Value term3 = pow(x - a - a * log_ratio, k(-1.5));
  Value term23 = b.select(b.compare(Compare::kLT, x, a), term2 - term3, term2 + term3);
  Value a_minus_x = a - x;
  Value term1 = log_ratio * term23 - sqrt(k(2) / a) * (a + x) / (a_minus_x * a_minus_x);
  Value stirling = k(1) + k(1) / (k(12) * a) * (k(1) + k(1) / (k(24) * a));
  Value far = -stirling * (x * term1) / root;
  Value in_band = b.binary(BinaryOp::kAnd, b.compare(Compare::kLE, k(0.9) * a, x),
                           b.compare(Compare::kLE, x, k(1.1) * a));
  Value large = b.select(in_band, near, far);

  // Otherwise: exp(p(v) / q(v)), the cubics' coefficients quadratic in u.
  static constexpr double kFit[3][8] = {
      {0.16009398, -0.094634809, 0.025146376, -0.0030648343, 1, 0.32668115, 0.10406089, 0.0014179084},
      {0.53487893, 0.1298071, 0.065735949, -0.0015649758, 0.16639465, 0.020070113, -0.0035938915, -0.00058392623},
      {0.040121004, -0.0065914022, -0.0026286047, -0.0013441777, 0.017050642, -0.0021309326, 0.00085092367,
       -1.5247877e-07}};
  Value u = log_ratio, v = log(a);
  std::vector<Value> c;
  for (int i = 0; i < 8; ++i) c.push_back(k(kFit[0][i]) + u * (k(kFit[1][i]) + u * k(kFit[2][i])));
  auto cubic = [&](int at) { return c[at] + v * (c[at + 1] + v * (c[at + 2] + v * c[at + 3])); };
  Value fitted = b.unary(UnaryOp::kExponential, cubic(0) / cubic(4));

  return b.select(b.compare(Compare::kLT, x, k(0.8)), small,
                  b.select(b.compare(Compare::kGT, a, k(8)), large, fitted));
}

}  // namespace

TORCHTPU_LOWERINGS(incomplete_gamma) {
  register_with_variants("igamma", {""}, igamma(false));
  register_with_variants("igammac", {""}, igamma(true));
  // CPU computes in double for every float dtype.
  register_lowering({"_standard_gamma_grad"}, [](LoweringContext& c) {
    return Values{cast(c.b, gamma_sample_grad(c.b, c.input_as(0, DType::kF64), c.input_as(1, DType::kF64)), c.out().dtype)};
  }, with_meta(shaped_like(0)));
}

// The dtypes CPU's kernels refuse that PyTorch's meta kernels let through (aten/dtype_support.h),
// measured against CPU PyTorch 2.11.
TORCHTPU_LOWERINGS(incomplete_gamma_cpu_refusals) {
  refuse_on_cpu("_standard_gamma_grad", {Refused::kHalfFloat, "_standard_gamma_grad_cpu"});
}

}  // namespace torchtpu::aten
