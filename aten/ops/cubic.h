// Cubic convolution (Keys, A = -0.75, as PyTorch's bicubic upsampling and grid sampling): the
// weights of the 4 taps at offsets -1..2 around a fractional position t, and their slopes d/dt.
#pragma once

#include <array>

#include "aten/ops/math.h"

namespace torchtpu::aten {

inline std::array<Value, 4> cubic_weights(Math& m, const Value& t) {
  constexpr double A = -0.75;
  auto near = [&](const Value& x) {  // |x| <= 1: ((A + 2) x - (A + 3)) x^2 + 1
    return m.add(m.mul(m.mul(m.sub(m.mul(m.k(A + 2, x), x), m.k(A + 3, x)), x), x), m.k(1, x));
  };
  auto far = [&](const Value& x) {  // 1 < |x| < 2: ((A x - 5A) x + 8A) x - 4A
    Value r = m.sub(m.mul(m.k(A, x), x), m.k(5 * A, x));
    r = m.add(m.mul(r, x), m.k(8 * A, x));
    return m.sub(m.mul(r, x), m.k(4 * A, x));
  };
  Value rest = m.sub(m.k(1, t), t);
  return {far(m.add(t, m.k(1, t))), near(t), near(rest), far(m.add(rest, m.k(1, t)))};
}

inline std::array<Value, 4> cubic_slopes(Math& m, const Value& t) {
  constexpr double A = -0.75;
  auto near = [&](const Value& x) {  // 3 (A + 2) x^2 - 2 (A + 3) x
    return m.mul(m.sub(m.mul(m.k(3 * (A + 2), x), x), m.k(2 * (A + 3), x)), x);
  };
  auto far = [&](const Value& x) {  // 3 A x^2 - 10 A x + 8 A
    return m.add(m.mul(m.sub(m.mul(m.k(3 * A, x), x), m.k(10 * A, x)), x), m.k(8 * A, x));
  };
  Value rest = m.sub(m.k(1, t), t);
  auto minus = [&](const Value& v) { return m.mul(v, m.k(-1, v)); };
  return {far(m.add(t, m.k(1, t))), near(t), minus(near(rest)), minus(far(m.add(rest, m.k(1, t))))};
}

}  // namespace torchtpu::aten
