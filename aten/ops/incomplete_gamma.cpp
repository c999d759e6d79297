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
  Value first = m.div(m.k(1, a), a);
  return converge(b, {a, x, first, first, a}, use, [](Math& lm, const V& s) {  // (a, x, term, sum, a + n)
    Value ap = lm.add(s[4], lm.k(1, s[4]));
    Value term = lm.mul(s[2], lm.div(s[1], ap)), sum = lm.add(s[3], term);
    return V{s[0], s[1], term, sum, ap, relative_change(lm, term, sum)};
  })[3];
}

// Q(a, x)'s continued fraction (for x >= a + 1), without the prefactor, by Lentz's method:
// 1 / (x + 1 - a - 1 (1 - a) / (x + 3 - a - 2 (2 - a) / (x + 5 - a - ...))).
Value continued_fraction(Builder& b, const Value& a, const Value& x, const Value& use) {
  Math m{b};
  double tiny = a.type.dtype == DType::kF64 ? 1e-300 : 1e-30;
  Value bn = m.add(m.sub(x, a), m.k(1, x)), d = m.div(m.k(1, bn), bn);
  V out = converge(b, {a, bn, m.k(1 / tiny, x), d, d, m.k(0, x)}, use, [tiny](Math& lm, const V& s) {
    // (a, b_i, c, d, h, i)
    Value i = lm.add(s[5], lm.k(1, s[5]));
    Value an = lm.mul(lm.mul(i, lm.sub(i, s[0])), lm.k(-1, i));
    Value bi = lm.add(s[1], lm.k(2, s[1]));
    auto not_tiny = [&](const Value& v) {
      return lm.b.select(lm.b.compare(Compare::kLT, lm.b.unary(UnaryOp::kAbs, v), lm.k(tiny, v)), lm.k(tiny, v), v);
    };
    Value d = lm.div(lm.k(1, bi), not_tiny(lm.add(lm.mul(an, s[3]), bi)));
    Value c = not_tiny(lm.add(bi, lm.div(an, s[2])));
    Value delta = lm.mul(d, c);
    return V{s[0], bi, c, d, lm.mul(s[4], delta), i, lm.b.unary(UnaryOp::kAbs, lm.sub(delta, lm.k(1, delta)))};
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
  Value use_series = is(Compare::kLT, m.sub(safe_x, safe_a), 1);
  Value prefactor = b.unary(UnaryOp::kExponential,
                            m.sub(m.sub(m.mul(safe_a, b.unary(UnaryOp::kLog, safe_x)), safe_x), b.unary(UnaryOp::kLgamma, safe_a)));
  Value p_series = m.mul(prefactor, series(b, safe_a, safe_x, both(regular, use_series)));
  Value q_fraction = m.mul(prefactor, continued_fraction(b, safe_a, safe_x, both(regular, b.unary(UnaryOp::kNot, use_series))));
  Value p = b.select(use_series, p_series, m.sub(m.k(1, a), q_fraction));
  Value q = b.select(use_series, m.sub(m.k(1, p), p_series), q_fraction);
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
    auto [p, q] = incomplete_gamma(c.b, c.bcast(c.in_as(0, t)), c.bcast(c.in_as(1, t)));
    return V{cast(c.b, upper ? q : p, c.out().dtype)};
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
  Value term = k(1), denom = a, series = m.div(k(1), a), series_sq = m.div(k(1), m.mul(a, a));
  for (int i = 1; i <= 5; ++i) {
    term = m.mul(term, m.div(b.unary(UnaryOp::kNegate, x), k(i)));
    denom = m.add(denom, k(1));
    series = m.add(series, m.div(term, denom));
    series_sq = m.add(series_sq, m.div(term, m.mul(denom, denom)));
  }
  Value x_pow_a = pow(x, a);
  Value pdf = m.mul(pow(x, m.sub(a, k(1))), b.unary(UnaryOp::kExponential, b.unary(UnaryOp::kNegate, x)));
  Value cdf_da = m.sub(m.mul(m.sub(log(x), b.unary(UnaryOp::kDigamma, a)), m.mul(x_pow_a, series)),
                       m.mul(x_pow_a, series_sq));
  Value small = b.unary(UnaryOp::kNegate, m.div(cdf_da, pdf));
  small = b.select(b.compare(Compare::kNE, small, small), k(0), small);

  // Large a, x near a: a polynomial; away from it, the saddle-point terms.
  Value numer1 = m.add(k(1), m.mul(m.mul(k(24), a), m.add(k(1), m.mul(k(12), a))));
  Value numer2 = m.add(m.sub(m.add(m.mul(k(1440), m.mul(a, a)), m.mul(m.mul(k(6), x), m.sub(k(53), m.mul(k(120), x)))),
                             m.div(m.mul(k(65), m.mul(x, x)), a)),
                       m.mul(a, m.add(k(107), m.mul(k(3600), x))));
  Value near = m.div(m.mul(numer1, numer2), m.mul(k(1244160), m.mul(m.mul(a, a), m.mul(a, a))));
  Value root = sqrt(m.mul(k(8), a)), log_ratio = log(m.div(x, a));
  Value term2 = m.div(root, m.sub(a, x));
  Value term3 = pow(m.sub(m.sub(x, a), m.mul(a, log_ratio)), k(-1.5));
  Value term23 = b.select(b.compare(Compare::kLT, x, a), m.sub(term2, term3), m.add(term2, term3));
  Value a_minus_x = m.sub(a, x);
  Value term1 = m.sub(m.mul(log_ratio, term23),
                      m.div(m.mul(sqrt(m.div(k(2), a)), m.add(a, x)), m.mul(a_minus_x, a_minus_x)));
  Value stirling = m.add(k(1), m.mul(m.div(k(1), m.mul(k(12), a)), m.add(k(1), m.div(k(1), m.mul(k(24), a)))));
  Value far = b.unary(UnaryOp::kNegate, m.div(m.mul(stirling, m.mul(x, term1)), root));
  Value in_band = b.binary(BinaryOp::kAnd, b.compare(Compare::kLE, m.mul(k(0.9), a), x),
                           b.compare(Compare::kLE, x, m.mul(k(1.1), a)));
  Value large = b.select(in_band, near, far);

  // Otherwise: exp(p(v) / q(v)), the cubics' coefficients quadratic in u.
  static constexpr double kFit[3][8] = {
      {0.16009398, -0.094634809, 0.025146376, -0.0030648343, 1, 0.32668115, 0.10406089, 0.0014179084},
      {0.53487893, 0.1298071, 0.065735949, -0.0015649758, 0.16639465, 0.020070113, -0.0035938915, -0.00058392623},
      {0.040121004, -0.0065914022, -0.0026286047, -0.0013441777, 0.017050642, -0.0021309326, 0.00085092367,
       -1.5247877e-07}};
  Value u = log_ratio, v = log(a);
  std::vector<Value> c;
  for (int i = 0; i < 8; ++i) c.push_back(m.add(k(kFit[0][i]), m.mul(u, m.add(k(kFit[1][i]), m.mul(u, k(kFit[2][i]))))));
  auto cubic = [&](int at) { return m.add(c[at], m.mul(v, m.add(c[at + 1], m.mul(v, m.add(c[at + 2], m.mul(v, c[at + 3])))))); };
  Value fitted = b.unary(UnaryOp::kExponential, m.div(cubic(0), cubic(4)));

  return b.select(b.compare(Compare::kLT, x, k(0.8)), small,
                  b.select(b.compare(Compare::kGT, a, k(8)), large, fitted));
}

}  // namespace

TORCHTPU_LOWERINGS(incomplete_gamma) {
  register_with_variants("igamma", {""}, igamma(false));
  register_with_variants("igammac", {""}, igamma(true));
  // CPU computes in double for every float dtype.
  register_lowering({"_standard_gamma_grad"}, [](LoweringContext& c) {
    return V{cast(c.b, gamma_sample_grad(c.b, c.in_as(0, DType::kF64), c.in_as(1, DType::kF64)), c.out().dtype)};
  }, with_meta(shaped_like(0)));
}

}  // namespace torchtpu::aten
