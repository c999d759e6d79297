// The singular value decomposition by one-sided Jacobi (Hestenes): plane rotations (with a phase
// for complex matrices) applied to the columns of A (and of V, stacked under A) until the columns are
// orthogonal; their norms are the singular values, V the accumulated rotations and the columns
// over their norms the left singular vectors. StableHLO has no SVD: a stablehlo.while runs sweeps
// until every pair of columns is orthogonal to working precision (Jacobi converges
// quadratically: 6-10 sweeps up to n = 32), each sweep a loop of n - 1 rounds of the round-robin
// ordering, a round rotating n / 2 disjoint column pairs at once. U comes from a Householder QR of the rotated columns, which also completes it
// to a square matrix for full_matrices and gives orthonormal columns for zero singular values.
//
// Singular vectors are unique only up to sign (a phase for complex matrices) and within repeated
// singular values, so they may differ from LAPACK's by those; U diag(S) Vh, S and every function
// of them (pinv, matrix_rank, cond, the nuclear and spectral norms) match CPU.
#include <cmath>

#include "aten/ops/householder.h"
#include "aten/ops/jacobi.h"

namespace torchtpu::aten {
namespace {

// One round over the column pairs (t_i, u_i) of w ([..., rows, 2h]): each pair is rotated so that
// its first `p` rows become orthogonal. Also returns the largest |cos| of the angle between two
// paired columns before the rotation.
std::pair<Value, Value> jacobi_round(Math& m, const Value& w, int64_t p) {
  Builder& b = m.b;
  int64_t rank = w.type.rank(), h = w.type.dims.back() / 2;
  Value t = rows(b, columns(b, w, 0, h), 0, p), u = rows(b, columns(b, w, h, 2 * h), 0, p);
  auto norm2 = [&](const Value& x) { return m.sum(abs_squared(b, x), {rank - 2}); };
  Value alpha = norm2(t), beta = norm2(u), gamma = m.sum(m.mul(conj(b, t), u), {rank - 2});  // [..., h]
  Value g = b.unary(UnaryOp::kAbs, gamma);
  Value cosine = m.div(g, b.unary(UnaryOp::kSqrt, m.mul(alpha, beta)));
  cosine = b.select(b.compare(Compare::kEQ, g, m.k(0, g)), m.k(0, g), cosine);
  return {rotate_pairs(m, w, jacobi_rotation(m, alpha, beta, gamma), rank - 1), largest(m, cosine)};
}

struct Rotated {
  Value g;  // [..., p, q]: x V, orthogonal columns by decreasing norm
  Value s;  // [..., q]: their norms, the singular values
  Value v;  // [..., q, q]: the right singular vectors (columns)
};

// x ([..., p, q], p >= q > 0) rotated until its columns are orthogonal.
Rotated jacobi(Math& m, const Value& x) {
  Builder& b = m.b;
  int64_t rank = x.type.rank(), p = x.type.dims[rank - 2], q = x.type.dims[rank - 1];
  std::vector<int64_t> batch = batch_of(x.type);
  // V stacked under x rotates with it; a zero column (its V part zero too) evens the pairs and
  // sorts last below
  Value w = padded_to_even(b, b.concatenate({x, eye(b, batch, q, q, x.type.dtype)}, rank - 2), rank - 1);
  // sweep while some pair was further from orthogonal than rounding (sqrt(p) ulps) allows
  Value tolerance = b.constant(std::sqrt(static_cast<double>(p)) * epsilon(x.type.dtype), {component_dtype(x.type.dtype), {}});
  w = jacobi_sweeps(b, w, rank - 1, tolerance, [p](Math& lm, const Value& cols) { return jacobi_round(lm, cols, p); });
  // by decreasing norm of the A part; the padding column (no V part) last
  Value norms = b.unary(UnaryOp::kSqrt, m.sum(abs_squared(b, rows(b, w, 0, p)), {rank - 2}));
  Value v_norms = m.sum(abs_squared(b, rows(b, w, p, p + q)), {rank - 2});
  Value key = b.select(b.compare(Compare::kLT, v_norms, m.k(0.25, v_norms)), m.k(-1, norms), norms);
  Value sorted = b.sort({spread_at(b, key, w.type.dims, rank - 1), w}, rank - 1, true, [](Builder& bb, const Values& a) {
    return Values{bb.compare(Compare::kGT, a[0], a[1])};
  })[1];
  Value g = columns(b, rows(b, sorted, 0, p), 0, q);
  return {g, b.unary(UnaryOp::kSqrt, m.sum(abs_squared(b, g), {rank - 2})), columns(b, rows(b, sorted, p, p + q), 0, q)};
}

// The left singular vectors of the rotated columns g ([..., p, q]): Q of g = QR with each column
// signed like R's (real) diagonal (so column j is g_j / s_j), all p columns when `full`.
Value left_vectors(Math& m, const Value& g, bool full) {
  Builder& b = m.b;
  int64_t rank = g.type.rank(), p = g.type.dims[rank - 2], q = g.type.dims[rank - 1];
  std::vector<int64_t> batch = batch_of(g.type);
  Qr qr = geqrf(m, g);
  Value q_full = apply_q(m, qr.a, qr.tau, eye(b, batch, p, full ? p : q, g.type.dtype), true, false);
  Value r = diagonal(b, qr.a);  // [..., q]: p >= q
  Value sign = b.select(b.compare(Compare::kLT, real_part(b, r), m.k(0, real_part(b, r))), m.k(-1, r), m.k(1, r));
  if (q_full.type.dims.back() > q) {
    std::vector<int64_t> rest = batch;
    rest.push_back(q_full.type.dims.back() - q);
    sign = b.concatenate({sign, b.constant(1, {g.type.dtype, rest})}, rank - 2);
  }
  return m.mul(q_full, spread_at(b, sign, q_full.type.dims, rank - 1));
}

// _linalg_svd(A, full_matrices, compute_uv, driver) -> (U, S, Vh). A wide matrix is decomposed
// through its adjoint: A^H = U' S V'^H gives A = V' S U'^H.
Values linalg_svd(LoweringContext& c) {
  Math m{c.b};
  Builder& b = c.b;
  Value a = c.input_uncast(0);
  bool full = c.arg(1).toBool(), compute_uv = c.arg(2).toBool();
  int64_t rank = a.type.rank();
  bool wide = a.type.dims[rank - 2] < a.type.dims[rank - 1];
  Value x = wide ? adjoint(b, a) : a;
  int64_t q = x.type.dims[rank - 1];
  std::vector<int64_t> batch = batch_of(x.type);
  Rotated r;
  if (q == 0) {
    std::vector<int64_t> s_dims = batch;
    s_dims.push_back(0);
    r = {x, b.constant(0, {component_dtype(x.type.dtype), s_dims}), eye(b, batch, 0, 0, x.type.dtype)};
  } else {
    r = jacobi(m, x);
  }
  if (!compute_uv) return {b.constant(0, c.out(0)), r.s, b.constant(0, c.out(2))};
  Value u = left_vectors(m, r.g, full);
  if (wide) return {r.v, r.s, adjoint(b, u)};
  return {u, r.s, adjoint(b, r.v)};
}

}  // namespace

TORCHTPU_LOWERINGS(svd) {
  register_lowering({"_linalg_svd", "_linalg_svd.U"}, linalg_svd, with_meta(column_major_result(2)));  // Vᴴ
}

}  // namespace torchtpu::aten
