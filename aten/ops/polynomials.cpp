// The orthogonal polynomials of torch.special (Chebyshev T, U, V, W and their shifted forms,
// Hermite H and He, Laguerre, Legendre) by their three-term recurrences: a stablehlo.while over
// the degree k = 2 .. max(n), each element keeping its value once k passes its own degree. The
// degree is n truncated toward zero, as on CPU; a negative (or NaN) degree gives 0. For |x| < 1
// and large degrees CPU evaluates Chebyshev polynomials through their trigonometric forms, which
// round differently from the recurrence: those elements use the same forms here.
#include <cmath>
#include <functional>

#include "aten/lowering.h"
#include "aten/ops/math.h"

namespace torchtpu::aten {
namespace {

using hlo::Builder;

struct Family {
  // P_1(x) (P_0 = 1)
  std::function<Value(Math&, const Value& x)> first;
  // P_k from x, k (a float shaped like x), P_{k-1} and P_{k-2}
  std::function<Value(Math&, const Value& x, const Value& k, const Value& p1, const Value& p2)> next;
  // Chebyshev: CPU's closed form for |x| < 1 above `trig_from` (t = acos(x), n the float degree)
  std::function<Value(Math&, const Value& t, const Value& n)> trig;
  int64_t trig_from = 0;
};

Value twice(Math& m, const Value& x) { return m.add(x, x); }

// 2x P_{k-1} - P_{k-2}: every Chebyshev kind
Value chebyshev_next(Math& m, const Value& x, const Value&, const Value& p1, const Value& p2) {
  return m.sub(m.mul(twice(m, x), p1), p2);
}

Value cos_of(Math& m, const Value& v) { return m.b.unary(UnaryOp::kCosine, v); }
Value sin_of(Math& m, const Value& v) { return m.b.unary(UnaryOp::kSine, v); }

const Family kChebyshevT{[](Math&, const Value& x) { return x; }, chebyshev_next,
                         [](Math& m, const Value& t, const Value& n) { return cos_of(m, m.mul(n, t)); }, 6};
const Family kChebyshevU{[](Math& m, const Value& x) { return twice(m, x); }, chebyshev_next,
                         [](Math& m, const Value& t, const Value& n) {  // sin((n+1)t) / sin t
                           return m.div(sin_of(m, m.mul(m.add(n, m.k(1, n)), t)), sin_of(m, t));
                         },
                         8};
const Family kChebyshevV{[](Math& m, const Value& x) { return m.sub(twice(m, x), m.k(1, x)); }, chebyshev_next,
                         [](Math& m, const Value& t, const Value& n) {  // cos((n+1/2)t) / cos(t/2)
                           return m.div(cos_of(m, m.mul(m.add(n, m.k(0.5, n)), t)), cos_of(m, m.mul(m.k(0.5, t), t)));
                         },
                         8};
const Family kChebyshevW{[](Math& m, const Value& x) { return m.add(twice(m, x), m.k(1, x)); }, chebyshev_next,
                         [](Math& m, const Value& t, const Value& n) {  // sin((n+1/2)t) / sin(t/2)
                           return m.div(sin_of(m, m.mul(m.add(n, m.k(0.5, n)), t)), sin_of(m, m.mul(m.k(0.5, t), t)));
                         },
                         8};
// physicists' Hermite: 2x H_{k-1} - 2(k-1) H_{k-2}
const Family kHermiteH{[](Math& m, const Value& x) { return twice(m, x); },
                       [](Math& m, const Value& x, const Value& k, const Value& p1, const Value& p2) {
                         return m.sub(m.mul(twice(m, x), p1), m.mul(twice(m, m.sub(k, m.k(1, k))), p2));
                       }};
// probabilists' Hermite: x He_{k-1} - (k-1) He_{k-2}
const Family kHermiteHe{[](Math&, const Value& x) { return x; },
                        [](Math& m, const Value& x, const Value& k, const Value& p1, const Value& p2) {
                          return m.sub(m.mul(x, p1), m.mul(m.sub(k, m.k(1, k)), p2));
                        }};
// ((2k - 1 - x) L_{k-1} - (k-1) L_{k-2}) / k
const Family kLaguerre{[](Math& m, const Value& x) { return m.sub(m.k(1, x), x); },
                       [](Math& m, const Value& x, const Value& k, const Value& p1, const Value& p2) {
                         Value k1 = m.sub(k, m.k(1, k));
                         return m.div(m.sub(m.mul(m.sub(m.add(k, k1), x), p1), m.mul(k1, p2)), k);
                       }};
// ((2k - 1) x P_{k-1} - (k-1) P_{k-2}) / k
const Family kLegendre{[](Math&, const Value& x) { return x; },
                       [](Math& m, const Value& x, const Value& k, const Value& p1, const Value& p2) {
                         Value k1 = m.sub(k, m.k(1, k));
                         return m.div(m.sub(m.mul(m.mul(m.add(k, k1), x), p1), m.mul(k1, p2)), k);
                       }};

// P_n(x) for x and n (any real or integer dtype) broadcast together, in the output's dtype.
// `shifted`: the polynomial of 2x - 1 (the shifted Chebyshev kinds).
Lowering polynomial(const Family& f, bool shifted = false) {
  return [&f, shifted](LoweringContext& c) {
    Builder& b = c.b;
    Math m{b};
    DType t = accumulator(c.out().dtype);
    Value x = c.broadcast_to_output(c.input_as(0, t)), n_raw = c.broadcast_to_output(c.input_uncast(1));
    if (shifted) x = twice(m, x) - m.k(1, x);
    Value n = b.convert(n_raw, DType::kS64);  // toward zero
    Value negative = b.compare(Compare::kLT, n, b.constant(0, n.type));
    if (is_floating(n_raw.type.dtype))  // CPU's int64 of a NaN degree is negative
      negative = b.binary(BinaryOp::kOr, negative, is_nan(n_raw));
    std::vector<int64_t> all;
    for (int64_t d = 0; d < n.type.rank(); ++d) all.push_back(d);
    hlo::TensorType index{DType::kS64, {}};
    Value top = b.reduce({n}, {b.constant(0, index)}, all, combine_with(BinaryOp::kMaximum))[0];
    Value one = m.k(1, x), p1 = f.first(m, x);
    Values out = b.while_loop(
        {b.constant(2, index), top, x, n, one, p1},
        [&](Builder& rb, const Values& a) { return Values{rb.compare(Compare::kLE, a[0], a[1])}; },
        [&](Builder& rb, const Values& a) {
          Math lm{rb};
          const Value &k = a[0], &xs = a[2], &degree = a[3], &prev = a[4], &cur = a[5];
          Value k_float = rb.broadcast_in_dim(rb.convert(k, xs.type.dtype), xs.type.dims, {});
          Value next = f.next(lm, xs, k_float, cur, prev);
          Value active = rb.compare(Compare::kLE, rb.broadcast_in_dim(k, degree.type.dims, {}), degree);
          return Values{k + rb.constant(1, index), a[1], xs, degree,
                        rb.select(active, cur, prev), rb.select(active, next, cur)};
        });
    Value r = b.select(b.compare(Compare::kEQ, n, b.constant(0, n.type)), one, out[5]);
    if (f.trig) {
      Value inside = b.compare(Compare::kLT, b.unary(UnaryOp::kAbs, x), one);
      Value large = b.compare(Compare::kGT, n, b.constant_int(f.trig_from, n.type));
      Value closed = f.trig(m, b.unary(UnaryOp::kAcos, x), b.convert(n, t));
      r = b.select(b.binary(BinaryOp::kAnd, inside, large), closed, r);
    }
    return Values{cast(b, b.select(negative, m.k(0, r), r), c.out().dtype)};
  };
}

}  // namespace

TORCHTPU_LOWERINGS(polynomials) {
  struct Named {
    const char* name;
    const Family& family;
    bool shifted;
  };
  static const Named kAll[] = {
      {"special_chebyshev_polynomial_t", kChebyshevT, false}, {"special_chebyshev_polynomial_u", kChebyshevU, false},
      {"special_chebyshev_polynomial_v", kChebyshevV, false}, {"special_chebyshev_polynomial_w", kChebyshevW, false},
      {"special_shifted_chebyshev_polynomial_t", kChebyshevT, true},
      {"special_shifted_chebyshev_polynomial_u", kChebyshevU, true},
      {"special_shifted_chebyshev_polynomial_v", kChebyshevV, true},
      {"special_shifted_chebyshev_polynomial_w", kChebyshevW, true},
      {"special_hermite_polynomial_h", kHermiteH, false}, {"special_hermite_polynomial_he", kHermiteHe, false},
      {"special_laguerre_polynomial_l", kLaguerre, false}, {"special_legendre_polynomial_p", kLegendre, false}};
  for (const Named& p : kAll) register_with_variants(p.name, {"", "x_scalar", "n_scalar"}, polynomial(p.family, p.shifted));
}

}  // namespace torchtpu::aten
