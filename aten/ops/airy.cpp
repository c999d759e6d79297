// The Airy function Ai (special.airy_ai), in float64:
//  - for kSeriesFrom <= x <= kSeriesTo its Maclaurin series Ai(0) f(x) + Ai'(0) g(x),
//    f = sum_k 3^k (1/3)_k x^3k / (3k)!, g = sum_k 3^k (2/3)_k x^(3k+1) / (3k+1)!, summed until
//    converged (converge.h). Its terms reach e^zeta, zeta = 2/3 |x|^(3/2), times the result
//    (e^2zeta for x > 0): at the ends of the range ~1e-8 relative in float64;
//  - beyond, the asymptotic expansions in zeta with u_k = Gamma(3k + 1/2) / (54^k k! Gamma(k + 1/2)),
//    cut at kAsymptoticTerms (they stop converging near k = 2 zeta; error about e^-2zeta):
//      x > 0: e^-zeta / (2 sqrt(pi) x^(1/4)) sum_k (-1)^k u_k / zeta^k
//      x < 0: (sin(zeta + pi/4) sum_k (-1)^k u_2k / zeta^2k - cos(zeta + pi/4) sum_k (-1)^k u_2k+1 / zeta^2k+1)
//             / (sqrt(pi) |x|^(1/4))
#include <cmath>

#include "aten/lowering.h"
#include "aten/ops/converge.h"

namespace torchtpu::aten {
namespace {

using hlo::Builder;

constexpr double kSeriesFrom = -9, kSeriesTo = 6;
constexpr int kAsymptoticTerms = 19;  // 2 zeta at x = 6 is 19.6

// Ai(0) f(x) + Ai'(0) g(x) for every (finite) element.
Value maclaurin(Builder& b, const Value& x) {
  Math m{b};
  Value everywhere = b.constant(1, {DType::kBool, x.type.dims});
  Values s = converge(b, {m.k(1, x), x * m.square(x), m.k(1, x), m.k(1, x), x, x}, everywhere, [](Math& lm, const Values& s) {
    // (k, x^3, f term, f, g term, g); the k-th terms divide the last ones by (3k-1) 3k and 3k (3k+1)
    Value three_k = s[0] * lm.k(3, s[0]);
    Value f_term = s[2] * s[1] / ((three_k - lm.k(1, three_k)) * three_k);
    Value g_term = s[4] * s[1] / (three_k * (three_k + lm.k(1, three_k)));
    Value f = s[3] + f_term, g = s[5] + g_term;
    Value change = lm.b.binary(BinaryOp::kMaximum, relative_change(lm, f_term, f), relative_change(lm, g_term, g));
    return Values{s[0] + lm.k(1, s[0]), s[1], f_term, f, g_term, g, change};
  });
  double ai0 = 1 / (std::cbrt(9.0) * std::tgamma(2.0 / 3)), dai0 = -1 / (std::cbrt(3.0) * std::tgamma(1.0 / 3));
  return m.k(ai0, x) * s[3] + m.k(dai0, x) * s[5];
}

// sum over k < kAsymptoticTerms with k % step == first of (-1)^(k/step) u_k r^k.
Value u_series(Math& m, const Value& r, int step, int first) {
  std::vector<double> u{1};
  for (int k = 1; k < kAsymptoticTerms; ++k)
    u.push_back(u.back() * (6.0 * k - 5) * (6.0 * k - 3) * (6.0 * k - 1) / (216.0 * k * (2.0 * k - 1)));
  Value sum = m.k(0, r), rs = m.k(1, r);
  for (int k = 0; k < step; ++k) rs = m.mul(rs, r);  // r^step
  for (int k = kAsymptoticTerms - 1; k >= 0; --k) {
    if (k % step != first) continue;
    sum = m.add(m.mul(sum, rs), m.k((k / step) % 2 ? -u[k] : u[k], r));
  }
  return first ? m.mul(sum, r) : sum;
}

Value airy_ai(Builder& b, const Value& x) {
  Math m{b};
  Value in_series = b.binary(BinaryOp::kAnd, b.compare(Compare::kGE, x, m.k(kSeriesFrom, x)),
                             b.compare(Compare::kLE, x, m.k(kSeriesTo, x)));
  Value series = maclaurin(b, b.select(in_series, x, m.k(0, x)));
  Value ax = b.select(in_series, m.k(2 * kSeriesTo, x), b.unary(UnaryOp::kAbs, x));  // keeps unused branches finite
  Value zeta = m.k(2.0 / 3, ax) * (ax * b.unary(UnaryOp::kSqrt, ax));
  Value r = m.k(1, zeta) / zeta;
  Value root_pi_x4 = m.k(std::sqrt(M_PI), ax) * b.unary(UnaryOp::kSqrt, b.unary(UnaryOp::kSqrt, ax));
  Value decaying = b.unary(UnaryOp::kExponential, zeta * m.k(-1, zeta)) * u_series(m, r, 1, 0) / (m.k(2, ax) * root_pi_x4);
  Value phase = zeta + m.k(M_PI / 4, zeta);
  Value oscillating = (b.unary(UnaryOp::kSine, phase) * u_series(m, r, 2, 0) - b.unary(UnaryOp::kCosine, phase) * u_series(m, r, 2, 1)) / root_pi_x4;
  Value tail = b.select(b.compare(Compare::kGT, x, m.k(0, x)), decaying, oscillating);
  // NaN at +-inf (-inf: sin(inf)), as on CPU and CUDA
  Value infinite = b.compare(Compare::kEQ, ax, m.k(INFINITY, ax));
  return b.select(infinite, m.k(NAN, x), b.select(in_series, series, tail));
}

}  // namespace

TORCHTPU_LOWERINGS(airy) {
  register_lowering({"special_airy_ai", "special_airy_ai.out"}, [](LoweringContext& c) {
    return Values{cast(c.b, airy_ai(c.b, c.input_as(0, DType::kF64)), c.out().dtype)};
  });
}

}  // namespace torchtpu::aten
