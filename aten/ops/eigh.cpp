// The eigendecomposition of symmetric and Hermitian matrices (linalg.eigh, eigvalsh) by two-sided
// parallel Jacobi: each round applies J^H A J for n/2 disjoint row-and-column pairs, sweeps running until
// the largest rotated off-diagonal entry is below rounding of A's Frobenius norm (LAPACK's
// accuracy: eps ||A||). The diagonal then holds the eigenvalues, and the accumulated rotations,
// stacked under A so the column rotations reach them, the eigenvectors. Ascending order, as
// LAPACK; eigenvectors match LAPACK's up to sign or phase (which PyTorch leaves unspecified). The
// input's other triangle, and the imaginary part of its diagonal, are ignored, as LAPACK does.
#include <cmath>

#include "aten/ops/jacobi.h"

namespace torchtpu::aten {
namespace {

// One round on w = [A; V] ([..., n + k, n], n even): the rotation zeroing each pair's A_pq,
// applied to the columns of both and the rows of A. Also returns the largest |A_pq| it zeroed.
std::pair<Value, Value> eigh_round(Math& m, const Value& w, int64_t n) {
  Builder& b = m.b;
  int64_t rank = w.type.rank(), h = n / 2;
  Value a = rows(b, w, 0, n);
  auto block_diagonal = [&](int64_t row, int64_t column) {  // diagonal of a [h, h] block of A
    return diagonal(b, columns(b, rows(b, a, row, row + h), column, column + h));
  };
  Value gamma = block_diagonal(0, h);
  Rotation r = jacobi_rotation(m, real_part(b, block_diagonal(0, 0)), real_part(b, block_diagonal(h, h)), gamma);
  Value turned = rotate_pairs(m, w, r, rank - 1);              // A J, V J
  Value a2 = rotate_pairs(m, rows(b, turned, 0, n), r, rank - 2);  // J^T A J
  Value next = b.concatenate({a2, rows(b, turned, n, w.type.dims[rank - 2])}, rank - 2);
  return {next, largest(m, b.unary(UnaryOp::kAbs, gamma))};
}

// _linalg_eigh(A, UPLO, compute_v) -> (eigenvalues, eigenvectors)
Values linalg_eigh(LoweringContext& c) {
  Builder& b = c.b;
  Math m{b};
  Value a = c.input_uncast(0);
  bool lower = c.arg(1).toStringRef() == "L", compute_v = c.arg(2).toBool();
  int64_t rank = a.type.rank(), n = a.type.dims.back();
  Value vectors_none = b.constant(0, c.out(1));
  if (n == 0) return {b.constant(0, c.out(0)), vectors_none};
  Value symmetric = triangle(b, a, lower) + adjoint(b, triangle(b, a, lower, lower ? -1 : 1));
  if (is_complex(a.type.dtype))  // the diagonal's imaginary part dropped
    symmetric = (symmetric + adjoint(b, symmetric)) * m.k(0.5, symmetric);
  Value padded = padded_to_even(b, padded_to_even(b, symmetric, rank - 1), rank - 2);
  int64_t even = padded.type.dims.back();
  Value w = b.concatenate({padded, padded_to_even(b, identity(b, a.type), rank - 1)}, rank - 2);
  std::vector<int64_t> all;
  for (int64_t d = 0; d < rank; ++d) all.push_back(d);
  Value norm = b.unary(UnaryOp::kSqrt, m.reduce(abs_squared(b, symmetric), all, BinaryOp::kAdd, 0));
  Value tolerance = norm * m.k(epsilon(a.type.dtype), norm);
  w = jacobi_sweeps(b, w, rank - 1, tolerance, [even](Math& lm, const Value& x) { return eigh_round(lm, x, even); });
  // eigenvalues off the diagonal, ascending; the padding (no V part) last
  Value values = real_part(b, diagonal(b, rows(b, w, 0, even))), v = rows(b, w, even, even + n);
  Value v_norms = m.sum(abs_squared(b, v), {rank - 2});
  Value key = b.select(b.compare(Compare::kLT, v_norms, m.k(0.25, v_norms)), m.k(INFINITY, values), values);
  auto ascending = [](Builder& bb, const Values& x) { return Values{bb.compare(Compare::kLT, x[0], x[1])}; };
  Value sorted_values = columns(b, b.sort({key, values}, rank - 2, true, ascending)[1], 0, n);
  if (!compute_v) return {sorted_values, vectors_none};
  Value sorted_v = b.sort({spread_at(b, key, v.type.dims, rank - 1), v}, rank - 1, true, ascending)[1];
  return {sorted_values, columns(b, sorted_v, 0, n)};
}

}  // namespace

TORCHTPU_LOWERINGS(eigh) {
  register_lowering({"_linalg_eigh", "_linalg_eigh.eigenvalues"}, linalg_eigh);
}

}  // namespace torchtpu::aten
