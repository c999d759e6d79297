// The regularized incomplete gamma functions P(a, x) (igamma, special.gammainc) and
// Q(a, x) = 1 - P (igammac, special.gammaincc). Below x = a + 1 the series
// P = e^-x x^a / Gamma(a) sum_n x^n / (a (a+1) ... (a+n)) converges fast; above, Q's continued
// fraction (evaluated by Lentz's method). Each runs in a stablehlo.while until every element
// that uses it has converged (at most kMaxIterations steps); the other is 1 minus it. The prefactor's
// exponent a log x - x - lgamma(a) cancels for large a: float32 results there are good to a few
// 1e-5 (CPU switches to Temme's expansion for a > 20). Edges as CPU:
// NaN for negative arguments and for a = x = 0, P = 1 at a = 0 or x = inf, P = 0 at x = 0 or
// a = inf.
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
  // the edges: P = 0 at x = 0 or a = inf, 1 at a = 0 or x = inf; NaN for negatives, NaN, a = x = 0
  Value zero = either(is(Compare::kEQ, x, 0), is(Compare::kEQ, a, INFINITY));
  Value one = either(is(Compare::kEQ, a, 0), is(Compare::kEQ, x, INFINITY));
  Value invalid = either(either(is(Compare::kLT, a, 0), is(Compare::kLT, x, 0)),
                         either(b.compare(Compare::kNE, a, a), b.compare(Compare::kNE, x, x)));
  invalid = either(invalid, both(zero, one));
  p = b.select(zero, m.k(0, p), b.select(one, m.k(1, p), p));
  p = b.select(invalid, m.k(NAN, p), p);
  Value q = b.select(regular, b.select(use_series, m.sub(m.k(1, p), p_series), q_fraction), m.sub(m.k(1, p), p));
  return {p, q};
}

Lowering igamma(bool upper) {
  return [upper](LoweringContext& c) {
    DType t = accumulator(c.out().dtype);
    auto [p, q] = incomplete_gamma(c.b, c.bcast(c.in_as(0, t)), c.bcast(c.in_as(1, t)));
    return V{cast(c.b, upper ? q : p, c.out().dtype)};
  };
}

}  // namespace

TORCHTPU_LOWERINGS(incomplete_gamma) {
  register_with_variants("igamma", {""}, igamma(false));
  register_with_variants("igammac", {""}, igamma(true));
}

}  // namespace torchtpu::aten
