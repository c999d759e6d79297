// The LDL^T factorization of symmetric matrices with Bunch-Kaufman pivoting (linalg.ldl_factor)
// and the solve with it (linalg.ldl_solve), as LAPACK's sytf2 and sytrs compute them for the
// lower triangle, so that LD and the pivots match CPU's: D has 1x1 and 2x2 blocks, a pivot
// p > 0 swapped rows and columns k and p (1-based), -p on both rows of a 2x2 block swapped k + 1
// and p. Each step is a masked update of the whole matrix at the matrix's own column k, so a
// batch, whose matrices take 1 and 2 steps differently, factors in one loop of n steps.
// Complex symmetric matrices follow zsytf2 (|re| + |im| as the magnitude), complex Hermitian ones
// (hermitian=True) zhetf2 and zhetrs: conjugates, and a real diagonal.
#include <cmath>

#include "aten/ops/math.h"
#include "aten/ops/matrix_util.h"

namespace torchtpu::aten {
namespace {

// Bunch-Kaufman's threshold, (1 + sqrt(17)) / 8: bounds the growth of the entries.
const double kAlpha = (1 + std::sqrt(17.0)) / 8;

// The entries of x where `at` holds, summed over `dim`: one per line picks it out.
Value pick(Builder& b, const Value& x, const Value& at, int64_t dim) {
  return b.reduce({b.select(at, x, b.constant(0, x.type))}, {b.constant(0, {x.type.dtype, {}})}, {dim},
                  combine_with(BinaryOp::kAdd))[0];
}

// Row or column i of each matrix ([..., n]); entry i of each vector ([...]).
Value row_at(Builder& b, const Value& a, const Value& i) {
  int64_t rank = a.type.rank();
  return pick(b, a, positions(b, a.type.dims, rank - 2, Compare::kEQ, i), rank - 2);
}
Value column_at(Builder& b, const Value& a, const Value& i) {
  int64_t rank = a.type.rank();
  return pick(b, a, positions(b, a.type.dims, rank - 1, Compare::kEQ, i), rank - 1);
}
Value entry_at(Builder& b, const Value& v, const Value& i) {
  int64_t rank = v.type.rank();
  return pick(b, v, positions(b, v.type.dims, rank - 1, Compare::kEQ, i), rank - 1);
}

// LAPACK's magnitude for pivoting: |x|, or |re x| + |im x| (cabs1) for complex x.
Value magnitude(Builder& b, const Value& x) {
  if (!is_complex(x.type.dtype)) return b.unary(UnaryOp::kAbs, x);
  return b.unary(UnaryOp::kAbs, b.unary(UnaryOp::kReal, x)) + b.unary(UnaryOp::kAbs, b.unary(UnaryOp::kImag, x));
}

// x with the imaginary part of its diagonal dropped.
Value real_diagonal(Builder& b, const Value& x) {
  int64_t rank = x.type.rank();
  hlo::TensorType index = index_type(x.type.dims);
  Value on = b.compare(Compare::kEQ, b.iota(index, rank - 2), b.iota(index, rank - 1));
  return b.select(on, real_as(b, b.unary(UnaryOp::kReal, x), x), x);
}

// x with rows i and j swapped (per matrix), then, when `columns`, its columns too.
Value swapped(Builder& b, const Value& x, const Value& i, const Value& j, bool columns) {
  int64_t rank = x.type.rank();
  auto along = [&](const Value& y, int64_t dim) {
    auto line = [&](const Value& at) {  // line `at` of y along dim, spread back over y
      std::vector<int64_t> keep;
      for (int64_t d = 0; d < rank; ++d)
        if (d != dim) keep.push_back(d);
      return b.broadcast_in_dim(pick(b, y, positions(b, y.type.dims, dim, Compare::kEQ, at), dim), y.type.dims, keep);
    };
    return b.select(positions(b, y.type.dims, dim, Compare::kEQ, i), line(j),
                    b.select(positions(b, y.type.dims, dim, Compare::kEQ, j), line(i), y));
  };
  Value rows = along(x, rank - 2);
  return columns ? along(rows, rank - 1) : rows;
}

// The largest magnitude among the entries of v ([..., n]) where `among` holds, and its first
// position (LAPACK's i*amax); -1 when there are none.
std::pair<Value, Value> largest_where(Builder& b, const Value& v, const Value& among) {
  Value m = magnitude(b, v);
  Value candidates = b.select(among, m, b.constant(-1, m.type));
  int64_t rank = v.type.rank();
  Values r = b.reduce({candidates, b.iota(index_type(v.type.dims), rank - 1)},
                      {b.constant(-INFINITY, {m.type.dtype, {}}), b.constant(0, index_type({}))}, {rank - 1},
                      extreme_with_index(true, m.type.dtype));
  return {r[0], r[1]};
}

// Where each matrix's step at column k goes: Bunch-Kaufman's choice of a 1x1 block at k (no
// interchange, or one with imax) or a 2x2 block at (k, k + 1) with k + 1 and imax interchanged.
struct Pivot {
  Value kp;    // [batch...]: the row and column moved to k (1x1) or to k + 1 (2x2)
  Value two;   // a 2x2 block
  Value zero;  // column k is zero (or NaN): no update, info records it
};

Pivot choose_pivot(Builder& b, const Value& a, const Value& k, bool hermitian) {
  Math m{b};
  int64_t rank = a.type.rank();
  auto diagonal_magnitude = [&](const Value& x) {  // a Hermitian matrix's diagonal is real
    return hermitian ? b.unary(UnaryOp::kAbs, real_part(b, x)) : magnitude(b, x);
  };
  auto where = [&](const Value& v, Compare dir, const Value& i) { return positions(b, v.type.dims, rank - 2, dir, i); };
  Value col_k = column_at(b, a, k);
  Value abs_akk = diagonal_magnitude(entry_at(b, col_k, k));
  auto [colmax_found, imax] = largest_where(b, col_k, where(col_k, Compare::kGT, k));
  Value colmax = b.binary(BinaryOp::kMaximum, colmax_found, m.k(0, colmax_found));
  Value zero = b.binary(BinaryOp::kOr, b.compare(Compare::kEQ, b.binary(BinaryOp::kMaximum, abs_akk, colmax), m.k(0, colmax)),
                        is_nan(abs_akk));
  // the largest off-diagonal magnitude in row (and column) imax of the trailing matrix
  Value row_imax = row_at(b, a, imax), col_imax = column_at(b, a, imax);
  Value in_row = b.binary(BinaryOp::kAnd, where(row_imax, Compare::kGE, k), where(row_imax, Compare::kLT, imax));
  Value rowmax = b.binary(BinaryOp::kMaximum, largest_where(b, row_imax, in_row).first,
                          largest_where(b, col_imax, where(col_imax, Compare::kGT, imax)).first);
  Value alpha = m.k(kAlpha, colmax);
  Value keep_k = b.binary(BinaryOp::kOr, zero,
                          b.binary(BinaryOp::kOr, b.compare(Compare::kGE, abs_akk, alpha * colmax),
                                   b.compare(Compare::kGE, abs_akk, alpha * colmax * (colmax / rowmax))));
  Value imax_1x1 = b.compare(Compare::kGE, diagonal_magnitude(entry_at(b, col_imax, imax)), alpha * rowmax);
  Value two = b.binary(BinaryOp::kAnd, b.unary(UnaryOp::kNot, keep_k), b.unary(UnaryOp::kNot, imax_1x1));
  return {b.select(keep_k, k, imax), two, zero};
}

// Rows and columns i and j interchanged in the trailing matrix (from column k on): the symmetric
// permutation of its full form, kept in the lower triangle; the columns left of k (L so far) stay.
Value interchanged(Builder& b, const Value& a, const Value& k, const Value& i, const Value& j, bool hermitian) {
  int64_t rank = a.type.rank();
  Value full = triangle(b, a, true) + transpose_last(b, triangle(b, a, true, -1), hermitian);
  Value lower = b.compare(Compare::kGE, b.iota(index_type(a.type.dims), rank - 2), b.iota(index_type(a.type.dims), rank - 1));
  Value trailing = b.binary(BinaryOp::kAnd, lower, positions(b, a.type.dims, rank - 1, Compare::kGE, k));
  return b.select(trailing, swapped(b, full, i, j, true), a);
}

// The trailing matrix below and right of a block at columns `from`..`last` of a, less the outer
// products of the block's columns `c` (below it) with the rows `w` (dsyr / the 2x2 loop of
// sytf2), over the lower triangle, and the block's columns below it replaced by `stored`.
Value block_update(Builder& b, const Value& a, const Value& from, const Value& last, const std::vector<Value>& c,
                   const std::vector<Value>& w, const std::vector<Value>& stored) {
  int64_t rank = a.type.rank();
  const std::vector<int64_t>& dims = a.type.dims;
  auto rows_of = [&](const Value& v) { return spread_at(b, v, dims, rank - 2); };  // v[..., i] at (i, j)
  auto columns_of = [&](const Value& v) { return spread_at(b, v, dims, rank - 1); };
  Value updated = a;
  for (size_t i = 0; i < c.size(); ++i) updated = updated - rows_of(c[i]) * columns_of(w[i]);
  Value lower = b.compare(Compare::kGE, b.iota(index_type(dims), rank - 2), b.iota(index_type(dims), rank - 1));
  Value inner = b.binary(BinaryOp::kAnd, lower, positions(b, dims, rank - 1, Compare::kGT, last));
  Value result = b.select(inner, updated, a);
  Value below = positions(b, dims, rank - 2, Compare::kGT, last);
  for (size_t i = 0; i < stored.size(); ++i) {
    Value column = from + b.constant(static_cast<double>(i), from.type);
    result = b.select(b.binary(BinaryOp::kAnd, below, positions(b, dims, rank - 1, Compare::kEQ, column)),
                      rows_of(stored[i]), result);
  }
  return result;
}

// A 1x1 block at column k: A -= x (x / akk)^T below and right of it, x /= akk (x^H for Hermitian).
Value update_1x1(Builder& b, const Value& a, const Value& k, bool hermitian) {
  Math m{b};
  Value x = column_at(b, a, k), akk = entry_at(b, x, k);
  Value d11 = hermitian ? real_as(b, m.k(1, real_part(b, akk)) / real_part(b, akk), akk)
                        : b.constant(1, akk.type) / akk;
  Value scaled = per_matrix(b, d11, x.type.dims) * (hermitian ? conj(b, x) : x);
  return block_update(b, a, k, k, {x}, {scaled}, {x * per_matrix(b, d11, x.type.dims)});
}

// A 2x2 block at columns k, k + 1: W = (those columns) D^-1 (sytf2's wk, wkp1; zhetf2 with
// D = |d21| and d21 / D a unit phase), the trailing matrix less (the columns) W^T.
Value update_2x2(Builder& b, const Value& a, const Value& k, bool hermitian) {
  Math m{b};
  Value k1 = k + b.constant(1, k.type);
  Value c0 = column_at(b, a, k), c1 = column_at(b, a, k1), d21 = entry_at(b, c0, k1);
  auto per = [&](const Value& s) { return per_matrix(b, s, c0.type.dims); };
  Value wk, wkp1;
  if (hermitian) {
    Value d = b.unary(UnaryOp::kAbs, d21);
    Value e11 = real_part(b, entry_at(b, c1, k1)) / d, e22 = real_part(b, entry_at(b, c0, k)) / d;
    Value tt = m.k(1, d) / (e11 * e22 - m.k(1, d));
    Value phase = b.binary(BinaryOp::kComplex, b.unary(UnaryOp::kReal, d21) / d, b.unary(UnaryOp::kImag, d21) / d);
    Value f = real_as(b, tt / d, d21);
    wk = per(f) * (per(real_as(b, e11, d21)) * c0 - per(phase) * c1);
    wkp1 = per(f) * (per(real_as(b, e22, d21)) * c1 - per(conj(b, phase)) * c0);
  } else {
    Value one = b.constant(1, d21.type);
    Value e11 = entry_at(b, c1, k1) / d21, e22 = entry_at(b, c0, k) / d21;
    Value f21 = one / (e11 * e22 - one) / d21;
    wk = per(f21) * (per(e11) * c0 - c1);
    wkp1 = per(f21) * (per(e22) * c1 - c0);
  }
  std::vector<Value> w = hermitian ? std::vector<Value>{conj(b, wk), conj(b, wkp1)} : std::vector<Value>{wk, wkp1};
  return block_update(b, a, k, k1, {c0, c1}, w, {wk, wkp1});
}

// One step of sytf2 at each matrix's column k (matrices already past n stay as they are):
// state = (A, pivots, k, info).
Values factor_step(Builder& b, const Values& state, bool hermitian) {
  Value a = state[0], pivots = state[1], k = state[2], info = state[3];
  int64_t rank = a.type.rank(), n = a.type.dims.back();
  const std::vector<int64_t>& dims = a.type.dims;
  const std::vector<int64_t>& line_dims = pivots.type.dims;
  Value one = b.constant(1, k.type);
  Value active = b.compare(Compare::kLT, k, b.constant(n, k.type));
  Pivot p = choose_pivot(b, a, k, hermitian);
  Value step = b.select(p.two, b.constant(2, k.type), one), k1 = k + one;
  a = interchanged(b, a, k, k + step - one, p.kp, hermitian);
  Value updated = b.select(per_matrix(b, p.two, dims), update_2x2(b, a, k, hermitian), update_1x1(b, a, k, hermitian));
  if (hermitian) updated = real_diagonal(b, updated);
  Value updating = b.binary(BinaryOp::kAnd, active, b.unary(UnaryOp::kNot, p.zero));
  updated = b.select(per_matrix(b, updating, dims), updated, state[0]);
  // pivots (1-based): kp + 1 for a 1x1 block, -(kp + 1) on both rows of a 2x2 one
  Value pivot = b.convert(p.kp + one, pivots.type.dtype);
  pivot = b.select(p.two, -pivot, pivot);
  Value at_k = b.binary(BinaryOp::kAnd, positions(b, line_dims, rank - 2, Compare::kEQ, k), per_matrix(b, active, line_dims));
  Value at_k1 = b.binary(BinaryOp::kAnd, positions(b, line_dims, rank - 2, Compare::kEQ, k1),
                         per_matrix(b, b.binary(BinaryOp::kAnd, active, p.two), line_dims));
  pivots = b.select(b.binary(BinaryOp::kOr, at_k, at_k1), per_matrix(b, pivot, line_dims), pivots);
  Value first_zero = b.binary(BinaryOp::kAnd, b.binary(BinaryOp::kAnd, active, p.zero),
                              b.compare(Compare::kEQ, info, b.constant(0, info.type)));
  info = b.select(first_zero, b.convert(k1, info.type.dtype), info);
  return {updated, pivots, b.select(active, k + step, k), info};
}

// linalg_ldl_factor_ex(A, hermitian, check_errors) -> (LD, pivots, info)
Values ldl_factor(LoweringContext& c) {
  Builder& b = c.b;
  Value a = c.input_uncast(0);
  int64_t n = a.type.dims.back();
  std::vector<int64_t> batch = batch_of(a.type), line = batch;
  line.push_back(n);
  Values state = {a, b.constant(0, {c.out(1).dtype, line}), b.constant(0, index_type(batch)), b.constant(0, c.out(2))};
  bool hermitian = is_complex(a.type.dtype) && c.arg(1).toBool();
  if (hermitian) state[0] = real_diagonal(b, a);  // LAPACK reads only the diagonal's real part
  state = counted_loop(b, n, state, [&](Builder& lb, const Value&, const Values& s) { return factor_step(lb, s, hermitian); });
  return {triangle(b, state[0], true), state[1], state[3]};
}

// sytrs's first pass, L D Y = P B, at each matrix's row k: state = (B, k), k rising.
Values forward_step(Builder& b, const Value& ld, const Value& pivots, const Values& state, bool hermitian) {
  Math m{b};
  Value x = state[0], k = state[1];
  int64_t rank = x.type.rank(), n = x.type.dims[rank - 2];
  const std::vector<int64_t>& dims = x.type.dims;
  Value one = b.constant(1, k.type), active = b.compare(Compare::kLT, k, b.constant(n, k.type));
  Value p = b.convert(entry_at(b, pivots, k), DType::kS64), two = b.compare(Compare::kLT, p, b.constant(0, p.type));
  Value kp = b.select(two, -p - one, p - one);
  Value k1 = k + one;
  auto rows_of = [&](const Value& v) { return spread_at(b, v, dims, rank - 2); };      // v[..., i] at (i, j)
  auto columns_of = [&](const Value& v) { return spread_at(b, v, dims, rank - 1); };   // v[..., j] at (i, j)
  auto eliminate = [&](const Value& y, const Value& l, const Value& from, const Value& after) {  // dger
    Value less = y - rows_of(l) * columns_of(row_at(b, y, from));  // y_i - l_i y[from]
    return b.select(positions(b, dims, rank - 2, Compare::kGT, after), less, y);
  };
  Value l0 = column_at(b, ld, k), l1 = column_at(b, ld, k1);
  auto per = [&](const Value& s) { return per_matrix(b, s, row_at(b, x, k).type.dims); };
  // a 1x1 block: swap k and kp, eliminate below k, scale row k by 1 / D_kk
  Value x1 = eliminate(swapped(b, x, k, kp, false), l0, k, k);
  Value akk = entry_at(b, l0, k);
  Value inverse = hermitian ? real_as(b, m.k(1, real_part(b, akk)) / real_part(b, akk), akk) : b.constant(1, akk.type) / akk;
  Value scaled = row_at(b, x1, k) * per(inverse);
  x1 = b.select(positions(b, dims, rank - 2, Compare::kEQ, k), columns_of(scaled), x1);
  // a 2x2 block: swap k + 1 and kp, eliminate below k + 1 with both columns, solve the block
  Value x2 = eliminate(eliminate(swapped(b, x, k1, kp, false), l0, k, k1), l1, k1, k1);
  Value akm1k = entry_at(b, l0, k1), akm1k_h = hermitian ? conj(b, akm1k) : akm1k;  // zhetrs: conj on row k
  Value akm1 = entry_at(b, l0, k) / akm1k_h, ak = entry_at(b, l1, k1) / akm1k;
  Value denom = akm1 * ak - b.constant(1, ak.type);
  Value bkm1 = row_at(b, x2, k) / per(akm1k_h), bk = row_at(b, x2, k1) / per(akm1k);
  Value new_k = (per(ak) * bkm1 - bk) / per(denom);
  Value new_k1 = (per(akm1) * bk - bkm1) / per(denom);
  x2 = b.select(positions(b, dims, rank - 2, Compare::kEQ, k), columns_of(new_k),
                b.select(positions(b, dims, rank - 2, Compare::kEQ, k1), columns_of(new_k1), x2));
  Value next = b.select(per_matrix(b, two, dims), x2, x1);
  Value step = b.select(two, b.constant(2, k.type), one);
  return {b.select(per_matrix(b, active, dims), next, x), b.select(active, k + step, k)};
}

// sytrs's second pass, L^T P^T X = Y, at each matrix's row k (the last row of a 2x2 block):
// state = (Y, k), k falling.
Values backward_step(Builder& b, const Value& ld, const Value& pivots, const Values& state, bool hermitian) {
  Math m{b};
  Value x = state[0], k = state[1];
  int64_t rank = x.type.rank();
  const std::vector<int64_t>& dims = x.type.dims;
  Value one = b.constant(1, k.type), active = b.compare(Compare::kGE, k, b.constant(0, k.type));
  Value p = b.convert(entry_at(b, pivots, b.binary(BinaryOp::kMaximum, k, b.constant(0, k.type))), DType::kS64);
  Value two = b.compare(Compare::kLT, p, b.constant(0, p.type));
  Value kp = b.select(two, -p - one, p - one);
  Value below = positions(b, dims, rank - 2, Compare::kGT, k);
  auto rows_of = [&](const Value& v) { return spread_at(b, v, dims, rank - 2); };
  auto columns_of = [&](const Value& v) { return spread_at(b, v, dims, rank - 1); };
  auto less_dot = [&](const Value& row, const Value& column) {  // y[row] - L[k+1:, column]^T y[k+1:] (dgemv)
    Value l = column_at(b, ld, column);
    Value terms = b.select(below, rows_of(hermitian ? conj(b, l) : l) * x, b.constant(0, x.type));
    return columns_of(row_at(b, x, row) - m.sum(terms, {rank - 2}));
  };
  Value km1 = k - one;
  Value y = b.select(positions(b, dims, rank - 2, Compare::kEQ, k), less_dot(k, k), x);
  Value in_block = b.binary(BinaryOp::kAnd, positions(b, dims, rank - 2, Compare::kEQ, km1), per_matrix(b, two, dims));
  y = b.select(in_block, less_dot(km1, km1), y);
  y = swapped(b, y, k, kp, false);
  Value step = b.select(two, b.constant(2, k.type), one);
  return {b.select(per_matrix(b, active, dims), y, x), b.select(active, k - step, k)};
}

// linalg_ldl_solve(LD, pivots, B, hermitian) -> X, LD and pivots broadcast over B's batch
Values ldl_solve(LoweringContext& c) {
  Builder& b = c.b;
  const std::vector<int64_t>& dims = c.out(0).dims;
  int64_t rank = static_cast<int64_t>(dims.size()), n = dims[rank - 2];
  std::vector<int64_t> batch(dims.begin(), dims.end() - 2), line = batch;
  line.push_back(n);
  Value ld = with_batch(b, c.input_uncast(0), batch), pivots = broadcast_to(b, c.input_uncast(1), line);
  Value x = broadcast_to(b, c.input_uncast(2), dims);
  bool hermitian = is_complex(x.type.dtype) && c.arg(3).toBool();
  Values state = counted_loop(b, n, {x, b.constant(0, index_type(batch))}, [&](Builder& lb, const Value&, const Values& s) {
    return forward_step(lb, ld, pivots, s, hermitian);
  });
  state = counted_loop(b, n, {state[0], b.constant(n - 1, index_type(batch))}, [&](Builder& lb, const Value&, const Values& s) {
    return backward_step(lb, ld, pivots, s, hermitian);
  });
  return {state[0]};
}

}  // namespace

TORCHTPU_LOWERINGS(ldl) {
  register_lowering({"linalg_ldl_factor_ex", "linalg_ldl_factor_ex.out"}, ldl_factor);
  register_lowering({"linalg_ldl_solve", "linalg_ldl_solve.out"}, ldl_solve);
}

}  // namespace torchtpu::aten
