// Iterations until convergence, for series and continued fractions evaluated element-wise: one
// stablehlo.while that steps every element until each element that needs it has converged.
#pragma once

#include <cmath>
#include <functional>
#include <vector>

#include "aten/ops/math.h"

namespace torchtpu::aten {

constexpr int64_t kMaxIterations = 2000;

// Convergence within 4 ulps: a stricter test can stall on rounding (a continued fraction's
// factors then wander around 1 until the step limit, each adding an ulp of error).
inline double convergence_epsilon(DType t) { return t == DType::kF64 ? 0x1p-50 : 0x1p-21; }

// Runs `step` (state -> new state followed by each element's relative change) while some element
// where `use` holds changed by more than convergence_epsilon, at most kMaxIterations times.
inline V converge(hlo::Builder& b, V state, const Value& use, const std::function<V(Math&, const V&)>& step) {
  hlo::TensorType count{DType::kS64, {}};
  double eps = convergence_epsilon(state[0].type.dtype);
  std::vector<int64_t> all;
  for (int64_t d = 0; d < use.type.rank(); ++d) all.push_back(d);
  size_t n = state.size();
  state.push_back(use);
  state.push_back(b.constant(0, count));
  state.push_back(b.constant(INFINITY, {state[0].type.dtype, {}}));
  V out = b.while_loop(
      state,
      [&](hlo::Builder& rb, const V& s) {
        return V{rb.binary(BinaryOp::kAnd, rb.compare(Compare::kLT, s[n + 1], rb.constant_int(kMaxIterations, count)),
                           rb.compare(Compare::kGT, s[n + 2], rb.constant(eps, s[n + 2].type)))};
      },
      [&](hlo::Builder& rb, const V& s) {
        Math lm{rb};
        V next = step(lm, V(s.begin(), s.begin() + n));
        Value change = rb.select(s[n], next.back(), lm.k(0, next.back()));
        next.back() = lm.reduce(change, all, BinaryOp::kMaximum, 0);
        next.insert(next.begin() + n, s[n]);
        next.insert(next.begin() + n + 1, rb.binary(BinaryOp::kAdd, s[n + 1], rb.constant(1, count)));
        return next;
      });
  out.resize(n);
  return out;
}

// |change| / |sum|, 0 where the sum is 0: the relative change a series term makes.
inline Value relative_change(Math& m, const Value& change, const Value& sum) {
  Value r = m.div(m.b.unary(UnaryOp::kAbs, change), m.b.unary(UnaryOp::kAbs, sum));
  return m.b.select(m.b.compare(Compare::kEQ, sum, m.k(0, sum)), m.k(0, sum), r);
}

}  // namespace torchtpu::aten
