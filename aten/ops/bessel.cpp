// Bessel functions of orders 0 and 1: I (i0, i1, i0e, i1e, special.modified_bessel_i0/i1), K
// (special.modified_bessel_k0/k1 and their exponentially scaled forms) and J, Y
// (special.bessel_j0/j1/y0/y1). Each is a power series near 0 and Hankel's asymptotic expansion
// beyond a switch point where both are accurate:
//  - the series sum_k t_k, t_k = (s x^2/4)^k (x/2)^n / (k! (k+n)!), s = +1 for I, -1 for J, summed
//    until its terms no longer change it (converge.h); K and Y add the logarithmic series
//    sum_k (psi(k+1) + psi(k+n+1)) t_k, summed in the same loop;
//  - the asymptotic series in 1/x with a_k = prod_{j<=k} (4n^2 - (2j-1)^2) / (k! 8^k), cut at the
//    term where it stops converging (its error is then about e^-2x).
// I's series has positive terms and runs in the input's precision. J, Y and K cancel in theirs
// (terms up to e^|x| times the result), so they run in float64: below their switch points the
// cancellation costs at most ~1e-8 relative, and above them the asymptotic series is as close.
#include <cmath>

#include "aten/lowering.h"
#include "aten/ops/converge.h"

namespace torchtpu::aten {
namespace {

using hlo::Builder;

constexpr double kEulerGamma = 0.57721566490153286061;
constexpr double kISeriesLimit = 20;   // I: every term positive, no cancellation
constexpr int kIAsymptoticTerms = 20;  // below 1e-17 relative from 20 on
constexpr double kJYSeriesLimit = 12;  // series terms up to ~4e3, asymptotic error ~e^-24
constexpr double kKSeriesLimit = 9;    // series cancels e^18 (~1e-8 in float64), asymptotic e^-18

// a_k(order) for k < terms: the coefficients of Hankel's expansions.
std::vector<double> hankel_coefficients(int order, int terms) {
  std::vector<double> a{1};
  for (int k = 1; k < terms; ++k) a.push_back(a.back() * (4.0 * order * order - (2.0 * k - 1) * (2.0 * k - 1)) / (8.0 * k));
  return a;
}

// sum_k c[k] r^k.
Value polynomial(Math& m, const Value& r, const std::vector<double>& c) {
  Value sum = m.k(0, r);
  for (auto it = c.rbegin(); it != c.rend(); ++it) sum = m.add(m.mul(sum, r), m.k(*it, r));
  return sum;
}

struct Series {
  Value plain;        // sum_k t_k: I_n(x) for sign +1, J_n(x) for sign -1
  Value logarithmic;  // sum_k (psi(k+1) + psi(k+n+1)) t_k
};

// Both series for every (finite) element of x; the second one's terms also decide convergence
// when `logarithmic` (K and Y use it).
Series power_series(Builder& b, const Value& x, int order, double sign, bool logarithmic) {
  Math m{b};
  Value q = m.square(x) * m.k(sign / 4, x);
  Value t0 = order == 0 ? m.k(1, x) : x * m.k(0.5, x);
  Value w0 = m.k(order == 0 ? -2 * kEulerGamma : 1 - 2 * kEulerGamma, x);  // psi(1) + psi(n+1)
  Value everywhere = b.constant(1, {DType::kBool, x.type.dims});
  Values s = converge(b, {m.k(1, x), q, t0, t0, w0, w0 * t0}, everywhere, [order, logarithmic](Math& lm, const Values& s) {
    // (k, q, t_k-1, sum, w_k-1, weighted sum)
    Value k = s[0], k_n = k + lm.k(order, k);
    Value t = s[2] * s[1] / (k * k_n);
    Value w = s[4] + (lm.k(1, k) / k + lm.k(1, k) / k_n);
    Value sum = s[3] + t, wt = w * t, wsum = s[5] + wt;
    Value change = relative_change(lm, t, sum);
    if (logarithmic) change = lm.b.binary(BinaryOp::kMaximum, change, relative_change(lm, wt, wsum));
    return Values{k + lm.k(1, k), s[1], t, sum, w, wsum, change};
  });
  return {s[3], s[5]};
}


// x where the series applies (`small`), elsewhere a stand-in keeping the unused branch finite.
Value series_argument(Builder& b, const Value& small, const Value& x, double stand_in) {
  return b.select(small, x, b.constant(stand_in, x.type));
}

// f(x) of an odd function from f(|x|): negated where x < 0.
Value odd(Builder& b, const Value& x, const Value& f_of_abs) {
  Math m{b};
  return b.select(b.compare(Compare::kLT, x, m.k(0, x)), f_of_abs * m.k(-1, f_of_abs), f_of_abs);
}

// I_order(x), scaled by e^-|x| when `scaled`.
Value bessel_i(Builder& b, const Value& x, int order, bool scaled) {
  Math m{b};
  Value ax = b.unary(UnaryOp::kAbs, x);
  Value small = b.compare(Compare::kLE, ax, m.k(kISeriesLimit, ax));
  Value series = power_series(b, series_argument(b, small, x, 0), order, 1, false).plain;
  if (scaled) series = series * b.unary(UnaryOp::kExponential, ax * m.k(-1, ax));
  Value big = b.select(small, m.k(2 * kISeriesLimit, ax), ax);  // keeps the unused branch finite
  std::vector<double> c = hankel_coefficients(order, kIAsymptoticTerms);
  for (size_t k = 1; k < c.size(); k += 2) c[k] = -c[k];
  Value root = b.unary(UnaryOp::kSqrt, big) * m.k(std::sqrt(2 * M_PI), big);  // 2 pi x would overflow first
  Value tail = polynomial(m, m.k(1, big) / big, c) / root;
  if (!scaled) tail = tail * b.unary(UnaryOp::kExponential, big);
  if (order == 1) tail = odd(b, x, tail);
  return b.select(is_nan(x), x, b.select(small, series, tail));
}

// J_order(x) and Y_order(x) for large x > 0: sqrt(2/(pi x)) (P cos chi - Q sin chi) and
// sqrt(2/(pi x)) (P sin chi + Q cos chi), chi = x - (2 order + 1) pi/4, P and Q the even and odd
// terms of sum_k (-1)^(k/2) a_k / x^k. NaN at infinity (cos(inf)), as on CPU and CUDA.
std::pair<Value, Value> hankel_jy(Builder& b, const Value& x, int order) {
  Math m{b};
  std::vector<double> p, q;
  std::vector<double> a = hankel_coefficients(order, 2 * static_cast<int>(kJYSeriesLimit));
  for (size_t k = 0; k < a.size(); ++k) (k % 2 ? q : p).push_back(k / 2 % 2 ? -a[k] : a[k]);
  Value r = m.k(1, x) / x, r2 = m.square(r);
  Value pv = polynomial(m, r2, p), qv = r * polynomial(m, r2, q);
  Value chi = x - m.k((2 * order + 1) * M_PI / 4, x);
  Value cos = b.unary(UnaryOp::kCosine, chi), sin = b.unary(UnaryOp::kSine, chi);
  Value amplitude = b.unary(UnaryOp::kSqrt, m.k(2 / M_PI, x) / x);
  return {amplitude * (pv * cos - qv * sin), amplitude * (pv * sin + qv * cos)};
}

Value bessel_j(Builder& b, const Value& x, int order) {
  Math m{b};
  Value ax = b.unary(UnaryOp::kAbs, x);
  Value small = b.compare(Compare::kLE, ax, m.k(kJYSeriesLimit, ax));
  Value series = power_series(b, series_argument(b, small, x, 0), order, -1, false).plain;
  Value tail = hankel_jy(b, b.select(small, m.k(2 * kJYSeriesLimit, ax), ax), order).first;
  if (order == 1) tail = odd(b, x, tail);
  return b.select(is_nan(x), x, b.select(small, series, tail));
}

// Y_n and K_n at x <= 0: -inf and +inf at 0, NaN below (and NaN stays NaN).
Value outside_domain(Builder& b, const Value& x, const Value& r, double at_zero) {
  Math m{b};
  Value y = b.select(b.compare(Compare::kEQ, x, m.k(0, x)), m.k(at_zero, x), r);
  return b.select(b.compare(Compare::kLT, x, m.k(0, x)), m.k(NAN, x), b.select(is_nan(x), x, y));
}

// Y_n(x) = [n = 1: -2/(pi x)] + (2/pi) ln(x/2) J_n(x) - (1/pi) sum_k (psi(k+1) + psi(k+n+1)) t_k
Value bessel_y(Builder& b, const Value& x, int order) {
  Math m{b};
  Value small = b.compare(Compare::kLE, x, m.k(kJYSeriesLimit, x));
  Value xs = series_argument(b, b.binary(BinaryOp::kAnd, small, b.compare(Compare::kGT, x, m.k(0, x))), x, 1);
  Series s = power_series(b, xs, order, -1, true);
  Value log_half = b.unary(UnaryOp::kLog, xs * m.k(0.5, xs));
  Value series = m.k(2 / M_PI, xs) * (log_half * s.plain) - m.k(1 / M_PI, xs) * s.logarithmic;
  if (order == 1) series = series - m.k(2 / M_PI, xs) / xs;
  Value tail = hankel_jy(b, b.select(small, m.k(2 * kJYSeriesLimit, x), x), order).second;
  return outside_domain(b, x, b.select(small, series, tail), -INFINITY);
}

// K_n(x) = [n = 1: 1/x] + (-1)^(n+1) ln(x/2) I_n(x) + (-1)^n (1/2) sum_k (psi(k+1) + psi(k+n+1)) t_k
// near 0; sqrt(pi/(2x)) e^-x sum_k a_k / x^k beyond. Scaled by e^x when `scaled`.
Value bessel_k(Builder& b, const Value& x, int order, bool scaled) {
  Math m{b};
  Value small = b.compare(Compare::kLE, x, m.k(kKSeriesLimit, x));
  Value xs = series_argument(b, b.binary(BinaryOp::kAnd, small, b.compare(Compare::kGT, x, m.k(0, x))), x, 1);
  Series s = power_series(b, xs, order, 1, true);
  Value log_part = b.unary(UnaryOp::kLog, xs * m.k(0.5, xs)) * s.plain;
  Value half_log_series = s.logarithmic * m.k(0.5, xs);
  Value series = order == 0 ? half_log_series - log_part
                            : m.k(1, xs) / xs + (log_part - half_log_series);
  if (scaled) series = series * b.unary(UnaryOp::kExponential, xs);
  Value far = b.select(small, m.k(2 * kKSeriesLimit, x), x);
  Value tail = b.unary(UnaryOp::kSqrt, m.k(M_PI / 2, far) / far) * polynomial(m, m.k(1, far) / far, hankel_coefficients(order, 2 * static_cast<int>(kKSeriesLimit)));
  if (!scaled) tail = tail * b.unary(UnaryOp::kExponential, far * m.k(-1, far));
  return outside_domain(b, x, b.select(small, series, tail), INFINITY);
}

// A lowering computing `f` in `dtype` (float64 for the kinds that cancel, see above).
Lowering special(std::function<Value(Builder&, const Value&)> f, bool in_float64) {
  return [f = std::move(f), in_float64](LoweringContext& c) {
    DType t = in_float64 ? DType::kF64 : accumulator(c.out().dtype);
    return Values{cast(c.b, f(c.b, c.input_as(0, t)), c.out().dtype)};
  };
}

Lowering i_lowering(int order, bool scaled) {
  return special([=](Builder& b, const Value& x) { return bessel_i(b, x, order, scaled); }, false);
}
Lowering k_lowering(int order, bool scaled) {
  return special([=](Builder& b, const Value& x) { return bessel_k(b, x, order, scaled); }, true);
}
Lowering j_lowering(int order) {
  return special([=](Builder& b, const Value& x) { return bessel_j(b, x, order); }, true);
}
Lowering y_lowering(int order) {
  return special([=](Builder& b, const Value& x) { return bessel_y(b, x, order); }, true);
}

}  // namespace

TORCHTPU_LOWERINGS(bessel) {
  register_with_variants("i0", {""}, i_lowering(0, false));
  register_lowering({"special_modified_bessel_i0", "special_modified_bessel_i0.out"}, i_lowering(0, false));
  register_lowering({"special_i0e", "special_i0e.out"}, i_lowering(0, true));
  register_lowering({"special_i1", "special_i1.out"}, i_lowering(1, false));
  register_lowering({"special_modified_bessel_i1", "special_modified_bessel_i1.out"}, i_lowering(1, false));
  register_lowering({"special_i1e", "special_i1e.out"}, i_lowering(1, true));
  register_lowering({"special_modified_bessel_k0", "special_modified_bessel_k0.out"}, k_lowering(0, false));
  register_lowering({"special_modified_bessel_k1", "special_modified_bessel_k1.out"}, k_lowering(1, false));
  register_lowering({"special_scaled_modified_bessel_k0", "special_scaled_modified_bessel_k0.out"}, k_lowering(0, true));
  register_lowering({"special_scaled_modified_bessel_k1", "special_scaled_modified_bessel_k1.out"}, k_lowering(1, true));
  register_lowering({"special_bessel_j0", "special_bessel_j0.out"}, j_lowering(0));
  register_lowering({"special_bessel_j1", "special_bessel_j1.out"}, j_lowering(1));
  register_lowering({"special_bessel_y0", "special_bessel_y0.out"}, y_lowering(0));
  register_lowering({"special_bessel_y1", "special_bessel_y1.out"}, y_lowering(1));
}

}  // namespace torchtpu::aten
