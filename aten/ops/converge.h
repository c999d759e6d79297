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

// Runs `step` (state -> new state followed by each element's relative change) on every element
// where `use` holds until it changed by at most convergence_epsilon, at most kMaxIterations times.
// A converged element keeps its state: stepping it on while others converge would add an ulp of
// rounding per step (erfcx(9.5) was 2e-5 off in float32 beside an element converging slowly).
inline Values converge(hlo::Builder& b, Values state, const Value& use, const std::function<Values(Math&, const Values&)>& step) {
  hlo::TensorType count{DType::kS64, {}};
  double eps = convergence_epsilon(state[0].type.dtype);
  std::vector<int64_t> all;
  for (int64_t d = 0; d < use.type.rank(); ++d) all.push_back(d);
  size_t n = state.size();
  state.push_back(use);  // the elements still stepping
  state.push_back(b.constant(0, count));
  Values out = b.while_loop(
      state,
      [&](hlo::Builder& rb, const Values& s) {
        Math lm{rb};
        Value any_active = lm.reduce(rb.convert(s[n], DType::kS64), all, BinaryOp::kMaximum, 0);
        return Values{rb.binary(BinaryOp::kAnd, rb.compare(Compare::kLT, s[n + 1], rb.constant_int(kMaxIterations, count)),
                                rb.compare(Compare::kGT, any_active, rb.constant(0, count)))};
      },
      [&](hlo::Builder& rb, const Values& s) {
        Math lm{rb};
        const Value& active = s[n];
        Values next = step(lm, Values(s.begin(), s.begin() + n));
        Value change = next.back();
        next.pop_back();
        for (size_t i = 0; i < n; ++i) next[i] = rb.select(active, next[i], s[i]);
        next.push_back(rb.binary(BinaryOp::kAnd, active, rb.compare(Compare::kGT, change, lm.k(eps, change))));
        next.push_back(s[n + 1] + rb.constant(1, count));
        return next;
      });
  out.resize(n);
  return out;
}

// |change| / |sum|: the relative change a series term makes; 0 for a zero term, inf for a
// partial sum of 0 that is still changing (J0's terms 1 - 1 at x = 2 reach 0 on the way).
inline Value relative_change(Math& m, const Value& change, const Value& sum) {
  Value r = m.div(m.b.unary(UnaryOp::kAbs, change), m.b.unary(UnaryOp::kAbs, sum));
  return m.b.select(m.b.compare(Compare::kEQ, change, m.k(0, change)), m.k(0, sum), r);
}

}  // namespace torchtpu::aten
