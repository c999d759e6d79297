// Modified Bessel functions of the first kind, orders 0 and 1, and their exponentially scaled
// forms (i0, i1, i0e, i1e; torch.special.modified_bessel_i0/i1 are the same functions). Up to
// |x| = kSeriesLimit the power series sum_k (x/2)^(2k+v) / (k! (k+v)!), its positive terms
// summed until they no longer change the sums (converge.h); above, the asymptotic series
// e^|x| / sqrt(2 pi |x|) sum_k (-1)^k a_k(v) / |x|^k with kAsymptoticTerms terms (below 1e-17
// relative from 20 on). Scaling by e^-|x| happens in the form that does not overflow.
#include <cmath>

#include "aten/lowering.h"
#include "aten/ops/converge.h"

namespace torchtpu::aten {
namespace {

using hlo::Builder;

constexpr double kSeriesLimit = 20;
constexpr int kAsymptoticTerms = 20;

// sum_k (x/2)^(2k+order) / (k! (k+order)!) for every element (|x| <= kSeriesLimit).
Value power_series(Builder& b, const Value& x, int order) {
  Math m{b};
  Value quarter_x2 = m.mul(m.square(x), m.k(0.25, x));
  Value first = order == 0 ? m.k(1, x) : m.mul(x, m.k(0.5, x));
  Value everywhere = b.constant(1, {DType::kBool, x.type.dims});
  return converge(b, {m.k(1, x), quarter_x2, first, first}, everywhere, [order](Math& lm, const V& s) {
    // (k, x^2/4, term, sum)
    Value term = lm.div(lm.mul(s[2], s[1]), lm.mul(s[0], lm.add(s[0], lm.k(order, s[0])))), sum = lm.add(s[3], term);
    return V{lm.add(s[0], lm.k(1, s[0])), s[1], term, sum, relative_change(lm, term, sum)};
  })[3];
}

// sqrt(2 pi |x|) e^-|x| I_order(|x|) for large |x|: sum_k (-1)^k a_k / |x|^k, a_k = prod_{j<=k}
// (4 order^2 - (2j-1)^2) / (k! 8^k).
Value asymptotic_sum(Math& m, const Value& ax, int order) {
  std::vector<double> c{1};
  for (int k = 1; k < kAsymptoticTerms; ++k)
    c.push_back(-c.back() * (4.0 * order * order - (2.0 * k - 1) * (2.0 * k - 1)) / (8.0 * k));
  Value r = m.div(m.k(1, ax), ax), sum = m.k(0, ax);
  for (auto it = c.rbegin(); it != c.rend(); ++it) sum = m.add(m.mul(sum, r), m.k(*it, ax));
  return sum;
}

// I_order(x), scaled by e^-|x| when `scaled`.
Value bessel_i(Builder& b, const Value& x, int order, bool scaled) {
  Math m{b};
  Value ax = b.unary(UnaryOp::kAbs, x);
  Value small = b.compare(Compare::kLE, ax, m.k(kSeriesLimit, ax));
  Value series = power_series(b, b.select(small, x, m.k(0, x)), order);
  if (scaled) series = m.mul(series, b.unary(UnaryOp::kExponential, m.mul(ax, m.k(-1, ax))));
  Value big = b.select(small, m.k(2 * kSeriesLimit, ax), ax);  // keeps the unused branch finite
  Value tail = m.div(asymptotic_sum(m, big, order), b.unary(UnaryOp::kSqrt, m.mul(big, m.k(2 * M_PI, big))));
  if (!scaled) tail = m.mul(tail, b.unary(UnaryOp::kExponential, big));
  if (order == 1) tail = b.select(b.compare(Compare::kLT, x, m.k(0, x)), m.mul(tail, m.k(-1, tail)), tail);
  Value nan = b.compare(Compare::kNE, x, x);
  return b.select(nan, x, b.select(small, series, tail));
}

Lowering bessel(int order, bool scaled) {
  return [order, scaled](LoweringContext& c) {
    DType t = accumulator(c.out().dtype);
    return V{cast(c.b, bessel_i(c.b, c.in_as(0, t), order, scaled), c.out().dtype)};
  };
}

}  // namespace

TORCHTPU_LOWERINGS(bessel) {
  register_with_variants("i0", {""}, bessel(0, false));
  register_lowering({"special_modified_bessel_i0", "special_modified_bessel_i0.out"}, bessel(0, false));
  register_lowering({"special_i0e", "special_i0e.out"}, bessel(0, true));
  register_lowering({"special_i1", "special_i1.out"}, bessel(1, false));
  register_lowering({"special_modified_bessel_i1", "special_modified_bessel_i1.out"}, bessel(1, false));
  register_lowering({"special_i1e", "special_i1e.out"}, bessel(1, true));
}

}  // namespace torchtpu::aten
