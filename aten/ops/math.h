// Arithmetic shorthands for lowerings that are formulas (normalization, losses, softmax).
#pragma once

#include <algorithm>
#include <cmath>
#include <optional>
#include <utility>
#include <vector>

#include "aten/ops/lowering_util.h"

namespace torchtpu::aten {

struct Math {
  hlo::Builder& b;
  // Set where CPU computes in a bfloat16/float16 `scalar_t`: every + - * / and constant is rounded
  // to it, the values kept in their wider type (float16 products computed in float16 would
  // reach XLA's CPU code as fused multiply-adds, rounded once).
  std::optional<DType> rounding = std::nullopt;

  hlo::Value rounded(const hlo::Value& v) { return rounding ? rounded_to(b, v, *rounding) : v; }
  hlo::Value add(const hlo::Value& x, const hlo::Value& y) { return rounded(x + y); }
  hlo::Value sub(const hlo::Value& x, const hlo::Value& y) { return rounded(x - y); }
  hlo::Value mul(const hlo::Value& x, const hlo::Value& y) { return rounded(x * y); }
  hlo::Value div(const hlo::Value& x, const hlo::Value& y) { return rounded(x / y); }
  // A constant shaped like `like`.
  hlo::Value k(double v, const hlo::Value& like) { return rounded(b.constant(v, like.type)); }

  hlo::Value reduce(const hlo::Value& x, const std::vector<int64_t>& dims, hlo::BinaryOp op, double init) {
    return b.reduce({x}, {b.constant(init, {x.type.dtype, {}})}, dims, combine_with(op))[0];
  }
  hlo::Value sum(const hlo::Value& x, const std::vector<int64_t>& dims) {
    return reduce(x, dims, hlo::BinaryOp::kAdd, 0);
  }
  // A float sum carrying each partial sum's rounding error (TwoSum at every combine, so partial
  // results may pair in any order): XLA's CPU reductions keep one accumulator per output, and
  // their rounding grows with the count (a BatchNorm's mean over 4096 values: 2.5e-6 relative,
  // CPU's cascade sum 5e-8); compensated, it is a few ulps. Infinite sums stay as they are.
  hlo::Value compensated_sum(const hlo::Value& x, const std::vector<int64_t>& dims) {
    if (!is_floating(x.type.dtype)) return sum(x, dims);
    hlo::TensorType scalar{x.type.dtype, {}};
    hlo::RegionBody two_sum = [](hlo::Builder& rb, const std::vector<hlo::Value>& a) {  // (s1, e1, s2, e2)
      hlo::Value s = a[0] + a[2], moved = s - a[0];
      hlo::Value error = a[0] - (s - moved) + (a[2] - moved);
      return std::vector<hlo::Value>{s, a[1] + a[3] + error};
    };
    std::vector<hlo::Value> r = b.reduce({x, k(0, x)}, {b.constant(0, scalar), b.constant(0, scalar)}, dims, two_sum);
    return b.select(b.unary(hlo::UnaryOp::kIsFinite, r[0]), add(r[0], r[1]), r[0]);
  }
  hlo::Value mean(const hlo::Value& x, const std::vector<int64_t>& dims) {
    double n = 1;
    for (int64_t d : dims) n *= static_cast<double>(x.type.dims[d]);
    hlo::Value s = compensated_sum(x, dims);
    return div(s, k(n, s));
  }
  // Broadcasts a reduction over `dims` back to `like`'s shape (keepdim + expand).
  hlo::Value expand_back(const hlo::Value& r, const hlo::Value& like, const std::vector<int64_t>& dims) {
    std::vector<int64_t> kept;
    for (int64_t d = 0; d < like.type.rank(); ++d)
      if (std::find(dims.begin(), dims.end(), d) == dims.end()) kept.push_back(d);
    return b.broadcast_in_dim(r, like.type.dims, kept);
  }
  hlo::Value reduce_keep(const hlo::Value& x, const std::vector<int64_t>& dims, hlo::BinaryOp op, double init) {
    return expand_back(reduce(x, dims, op, init), x, dims);
  }
  // The vector norm of x over dims: (sum |x|^ord)^(1/ord); the max |x| for ord=inf, the min for
  // -inf, the count of non-zeros for 0; computed in `dtype` (abs first: complex x gives reals).
  hlo::Value vector_norm(const hlo::Value& x, const std::vector<int64_t>& dims, double ord, DType dtype) {
    hlo::Value a = cast(b, b.unary(hlo::UnaryOp::kAbs, x), dtype);
    if (std::isinf(ord)) {
      hlo::Value r = ord > 0 ? reduce(a, dims, hlo::BinaryOp::kMaximum, 0) : reduce(a, dims, hlo::BinaryOp::kMinimum, INFINITY);
      hlo::Value s = sum(a, dims);  // NaN exactly when some |x| is: the max/min must propagate it
      return b.select(is_nan(s), s, r);
    }
    if (ord == 0) return sum(b.convert(b.compare(hlo::Compare::kNE, a, k(0, a)), a.type.dtype), dims);
    if (ord == 1) return sum(a, dims);
    hlo::Value s = sum(b.binary(hlo::BinaryOp::kPower, a, k(ord, a)), dims);
    return b.binary(hlo::BinaryOp::kPower, s, k(1.0 / ord, s));
  }
  hlo::Value square(const hlo::Value& x) { return mul(x, x); }
  // Mean and biased variance over `dims` (both keep only the other dims). A complex sample's
  // variance is the mean squared modulus of its deviations: a real.
  std::pair<hlo::Value, hlo::Value> moments(const hlo::Value& x, const std::vector<int64_t>& dims) {
    hlo::Value m = mean(x, dims);
    hlo::Value d = sub(x, expand_back(m, x, dims));
    return {m, mean(abs_squared(b, d), dims)};
  }
  // Broadcasts a per-channel vector (dimension 1) to `like`'s shape.
  hlo::Value channel(const hlo::Value& v, const hlo::Value& like) {
    return b.broadcast_in_dim(v, like.type.dims, {1});
  }
  // Sums `full` down to `dims` (a shape it was broadcast from): the gradient of a broadcast.
  hlo::Value sum_to(const hlo::Value& full, const std::vector<int64_t>& dims) {
    int64_t lead = full.type.rank() - static_cast<int64_t>(dims.size());
    std::vector<int64_t> reduced;
    for (int64_t d = 0; d < full.type.rank(); ++d)
      if (d < lead || (dims[d - lead] == 1 && full.type.dims[d] != 1)) reduced.push_back(d);
    return b.reshape(reduced.empty() ? full : sum(full, reduced), dims);
  }
};

// The combiner of a (value, index) reduction that picks the max (or min) and its index: argmax,
// max with indices, max pooling. A total order on pairs, so XLA may combine in any order: NaN
// beats any number, then the larger (smaller) value; equal values (and two NaNs) go to the
// earlier index. Region arguments are (acc_value, acc_index, value, index).
inline hlo::RegionBody extreme_with_index(bool is_max, DType dtype) {
  return [=](hlo::Builder& b, const std::vector<hlo::Value>& a) {
    using hlo::BinaryOp;
    auto both = [&](const hlo::Value& p, const hlo::Value& q) { return b.binary(BinaryOp::kAnd, p, q); };
    auto either = [&](const hlo::Value& p, const hlo::Value& q) { return b.binary(BinaryOp::kOr, p, q); };
    hlo::Value index_first = b.compare(hlo::Compare::kLT, a[3], a[1]);
    hlo::Value better = b.compare(is_max ? hlo::Compare::kGT : hlo::Compare::kLT, a[2], a[0]);
    hlo::Value take = either(better, both(b.compare(hlo::Compare::kEQ, a[2], a[0]), index_first));
    if (is_floating(dtype)) {
      hlo::Value acc_nan = is_nan(a[0]), x_nan = is_nan(a[2]);
      hlo::Value nan_wins = both(x_nan, either(b.unary(hlo::UnaryOp::kNot, acc_nan), index_first));
      take = either(nan_wins, both(b.unary(hlo::UnaryOp::kNot, either(acc_nan, x_nan)), take));
    }
    return std::vector<hlo::Value>{b.select(take, a[2], a[0]), b.select(take, a[3], a[1])};
  };
}

// max or min of two values where a NaN in either operand wins, as PyTorch's maximum, clamp and
// amax (XLA's maximum may return the other operand).
inline hlo::Value nan_extreme(hlo::Builder& b, hlo::BinaryOp op, const hlo::Value& x, const hlo::Value& y) {
  hlo::Value m = b.binary(op, x, y);
  if (!is_floating(x.type.dtype)) return m;
  m = b.select(is_nan(y), y, m);
  return b.select(is_nan(x), x, m);
}

inline hlo::RegionBody nan_extreme_with(hlo::BinaryOp op) {
  return [op](hlo::Builder& b, const std::vector<hlo::Value>& a) {
    return std::vector<hlo::Value>{nan_extreme(b, op, a[0], a[1])};
  };
}

// log(exp(x) + exp(y)) of complex numbers, as CPU computes it (logaddexp, logcumsumexp): with lo
// and hi the operands ordered by real part (y is lo on a tie), hi + log1p(exp(lo - hi)); a NaN
// part anywhere gives NaN + NaN i; equal infinite real parts give lo (-inf) or
// log(exp(lo) + exp(hi)) (+inf).
inline hlo::Value complex_log_add_exp(hlo::Builder& b, const hlo::Value& x, const hlo::Value& y) {
  using hlo::BinaryOp, hlo::Compare, hlo::UnaryOp, hlo::Value;
  Math m{b};
  auto re = [&](const Value& v) { return b.unary(UnaryOp::kReal, v); };
  auto im = [&](const Value& v) { return b.unary(UnaryOp::kImag, v); };
  auto exp = [&](const Value& v) { return b.unary(UnaryOp::kExponential, v); };
  auto nan_in = [&](const Value& v) {
    return b.binary(BinaryOp::kOr, b.compare(Compare::kNE, re(v), re(v)), b.compare(Compare::kNE, im(v), im(v)));
  };
  Value x_lower = b.compare(Compare::kLT, re(x), re(y));
  Value lo = b.select(x_lower, x, y), hi = b.select(x_lower, y, x);
  Value r = hi + b.unary(UnaryOp::kLogPlusOne, exp(lo - hi));
  Value both_infinite = b.binary(BinaryOp::kAnd, b.compare(Compare::kEQ, re(lo), re(hi)),
                                 b.unary(UnaryOp::kNot, b.unary(UnaryOp::kIsFinite, re(lo))));
  Value at_infinity = b.select(b.compare(Compare::kLT, re(lo), m.k(0, re(lo))), lo, b.unary(UnaryOp::kLog, exp(lo) + exp(hi)));
  r = b.select(both_infinite, at_infinity, r);
  Value nan = m.k(NAN, re(x));
  return b.select(b.binary(BinaryOp::kOr, nan_in(x), nan_in(y)), b.binary(BinaryOp::kComplex, nan, nan), r);
}

}  // namespace torchtpu::aten
