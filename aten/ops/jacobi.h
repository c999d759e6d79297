// Parallel Jacobi rotations, shared by the SVD (one-sided: rotations of columns) and the
// symmetric eigendecomposition (two-sided: of rows and columns). A round rotates the pairs
// (i, h + i) of a dimension of size 2h at once, then moves the entries to the next round's pairs
// with one fixed shuffle (the round-robin tournament, entry 0 staying put), so 2h - 1 rounds pair
// every two entries once: a sweep. Complex matrices first turn each pair's coupling real with a
// unit phase factor, then rotate as real ones do.
#pragma once

#include <optional>
#include <vector>

#include "aten/ops/math.h"
#include "aten/ops/matrix_util.h"

namespace torchtpu::aten {

constexpr int64_t kMaxJacobiSweeps = 30;

inline double epsilon(DType t) { return component_dtype(t) == DType::kF64 ? 0x1p-52 : 0x1p-23; }

// x[from:to] along `dim`.
inline Value range(Builder& b, const Value& x, int64_t dim, int64_t from, int64_t to) {
  std::vector<int64_t> start(x.type.rank(), 0), limit = x.type.dims, step(x.type.rank(), 1);
  start[dim] = from;
  limit[dim] = to;
  return b.slice(x, start, limit, step);
}

inline Value rows(Builder& b, const Value& x, int64_t from, int64_t to) { return range(b, x, x.type.rank() - 2, from, to); }
inline Value columns(Builder& b, const Value& x, int64_t from, int64_t to) { return range(b, x, x.type.rank() - 1, from, to); }

// The largest element of v (over every dimension).
inline Value largest(Math& m, const Value& v) {
  std::vector<int64_t> all;
  for (int64_t d = 0; d < v.type.rank(); ++d) all.push_back(d);
  return m.reduce(v, all, BinaryOp::kMaximum, 0);
}

struct Rotation {
  Value cos, sin;  // [..., h], real
  // Complex matrices: conj(gamma) / |gamma| ([..., h]), the unit factor that makes each pair's
  // coupling gamma real. The second column of a pair is multiplied by it before the rotation,
  // the second row (the adjoint side) by its conjugate.
  std::optional<Value> phase;
};

// The rotation of each pair (p, q) that zeroes gamma in [[alpha, gamma], [conj(gamma), beta]]
// (alpha and beta real): its tan is the smaller root of tan^2 + 2 zeta tan - 1 = 0,
// zeta = (beta - alpha) / 2 |gamma| (none when gamma is 0).
inline Rotation jacobi_rotation(Math& m, const Value& alpha, const Value& beta, const Value& gamma) {
  Builder& b = m.b;
  Value g = gamma;
  std::optional<Value> phase;
  if (is_complex(gamma.type.dtype)) {
    g = b.unary(UnaryOp::kAbs, gamma);
    Value zero = b.compare(Compare::kEQ, g, m.k(0, g));
    Value safe = b.select(zero, m.k(1, g), g);
    Value re = b.select(zero, m.k(1, g), m.div(b.unary(UnaryOp::kReal, gamma), safe));
    Value im = m.div(-b.unary(UnaryOp::kImag, gamma), safe);
    phase = b.binary(BinaryOp::kComplex, re, im);
  }
  Value zeta = m.div(m.sub(beta, alpha), m.mul(m.k(2, g), g));
  Value root = m.add(b.unary(UnaryOp::kAbs, zeta), b.unary(UnaryOp::kSqrt, m.add(m.k(1, zeta), m.square(zeta))));
  Value sign = b.select(b.compare(Compare::kGE, zeta, m.k(0, zeta)), m.k(1, zeta), m.k(-1, zeta));
  Value tan = b.select(b.compare(Compare::kEQ, g, m.k(0, g)), m.k(0, g), m.div(sign, root));
  Value cos = m.div(m.k(1, tan), b.unary(UnaryOp::kSqrt, m.add(m.k(1, tan), m.square(tan))));
  return {cos, m.mul(cos, tan), phase};
}

// Rotates the pairs (i, h + i) along `dim` of w (p' = c p - s q, q' = s p + c q), then shuffles
// them into the next round's pairs. Columns (the last dimension) take the rotation's phase, rows
// its conjugate.
inline Value rotate_pairs(Math& m, const Value& w, const Rotation& r, int64_t dim) {
  Builder& b = m.b;
  int64_t h = w.type.dims[dim] / 2;
  Value t = range(b, w, dim, 0, h), u = range(b, w, dim, h, 2 * h);
  if (r.phase) {
    bool columns = dim == w.type.rank() - 1;
    u = m.mul(u, spread_at(b, columns ? *r.phase : conj(b, *r.phase), u.type.dims, dim));
  }
  Value c = spread_at(b, real_as(b, r.cos, w), t.type.dims, dim), s = spread_at(b, real_as(b, r.sin, w), t.type.dims, dim);
  Value t2 = m.sub(m.mul(c, t), m.mul(s, u)), u2 = m.add(m.mul(s, t), m.mul(c, u));
  std::vector<Value> next = {t2, u2};
  if (h > 1)
    next = {range(b, t2, dim, 0, 1), range(b, u2, dim, 0, 1), range(b, t2, dim, 1, h - 1), range(b, u2, dim, 1, h),
            range(b, t2, dim, h - 1, h)};
  std::vector<Value> kept;
  for (const Value& p : next)
    if (p.type.dims[dim] > 0) kept.push_back(p);
  return b.concatenate(kept, dim);
}

// w with a zero entry appended along `dim` when its size there is odd (pairs need an even count).
inline Value padded_to_even(Builder& b, const Value& w, int64_t dim) {
  if (w.type.dims[dim] % 2 == 0) return w;
  std::vector<int64_t> zero_dims = w.type.dims;
  zero_dims[dim] = 1;
  return b.concatenate({w, b.constant(0, {w.type.dtype, zero_dims})}, dim);
}

// Sweeps (each a loop of rounds) while the largest off-diagonal measure `round` reports exceeds
// `tolerance`, at most kMaxJacobiSweeps. `round(m, w) -> (next w, measure before the rotation)`.
template <typename Round>
Value jacobi_sweeps(Builder& b, const Value& w, int64_t pairs_dim, const Value& tolerance, Round round) {
  hlo::TensorType count{DType::kS32, {}};
  Value big = b.broadcast_in_dim(b.constant(INFINITY, {tolerance.type.dtype, {}}), tolerance.type.dims, {});
  return b.while_loop(
      {w, b.constant(0, count), big, tolerance},
      [&](Builder& rb, const Values& a) {
        return Values{rb.binary(BinaryOp::kAnd, rb.compare(Compare::kLT, a[1], rb.constant(kMaxJacobiSweeps, count)),
                                rb.compare(Compare::kGT, a[2], a[3]))};
      },
      [&](Builder& rb, const Values& a) {
        Values swept = counted_loop(rb, a[0].type.dims[pairs_dim] - 1, {a[0], rb.constant(0, a[2].type)},
                                    [&](Builder& lb, const Value&, const Values& state) {
                                      Math lm{lb};
                                      auto [next, measure] = round(lm, state[0]);
                                      return Values{next, lb.binary(BinaryOp::kMaximum, state[1], measure)};
                                    });
        return Values{swept[0], a[1] + rb.constant(1, count), swept[1], a[3]};
      })[0];
}

}  // namespace torchtpu::aten
