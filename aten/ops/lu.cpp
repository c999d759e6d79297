// LU factorization with partial pivoting, and what PyTorch builds on it: lu_unpack, linalg_lu,
// lu_solve, solve, inv, det, slogdet. The factorization is LAPACK's getf2 as a stablehlo.while
// over the columns, each step on whole matrices with masks, so a batch factors at once.
#include <cmath>

#include "aten/ops/math.h"
#include "aten/ops/matrix_util.h"

namespace torchtpu::aten {
namespace {

// det and slogdet factor A^T when A is a contiguous real tensor, as CPU does (a contiguous A^T is
// what LAPACK wants): their backward formulas read the LU they return with that convention.
Value as_det_factors_it(const LoweringContext& c, const Value& a) {
  const at::Tensor& meta = c.arg(0).toTensor();
  return meta.is_contiguous() && !meta.is_complex() ? transpose_last(c.b, a) : a;
}

struct Lu {
  Value lu;      // L (unit diagonal, below) and U (on and above the diagonal) in one [..., m, n]
  Value pivots;  // [..., min(m, n)] s64, 0-based: row j was swapped with row pivots[j]
  Value info;    // [...] s32: 0, or 1 + the first column whose pivot is exactly zero
};


// The leading dimensions of `dims`, as broadcast_in_dim maps a batch-shaped value into them.
std::vector<int64_t> leading(int64_t count) {
  std::vector<int64_t> d;
  for (int64_t i = 0; i < count; ++i) d.push_back(i);
  return d;
}

// Along `dim` of x, the slice at position `at` (one position per batch: at's shape is x's leading
// dimensions).
Value entry_at(Builder& b, const Value& x, int64_t dim, const Value& at) {
  Value position = b.broadcast_in_dim(at, x.type.dims, leading(at.type.rank()));
  Value here = b.compare(Compare::kEQ, b.iota(index_type(x.type.dims), dim), position);
  return b.reduce({b.select(here, x, b.constant(0, x.type))}, {b.constant(0, {x.type.dtype, {}})}, {dim},
                  combine_with(BinaryOp::kAdd))[0];
}

// LAPACK's pivot magnitude: |x| for reals, |re| + |im| for complex (izamax).
Value magnitude(Builder& b, const Value& x) {
  if (!is_complex(x.type.dtype)) return b.unary(UnaryOp::kAbs, x);
  return b.unary(UnaryOp::kAbs, b.unary(UnaryOp::kReal, x)) + b.unary(UnaryOp::kAbs, b.unary(UnaryOp::kImag, x));
}

Lu factor(Builder& outer, const Value& input, bool pivot) {
  int64_t rank = input.type.rank(), m = input.type.dims[rank - 2], n = input.type.dims[rank - 1], k = std::min(m, n);
  std::vector<int64_t> batch = batch_of(input.type), column_dims = batch, pivot_dims = batch;
  column_dims.push_back(m);
  pivot_dims.push_back(k);
  Values start{input, outer.constant(0, index_type(pivot_dims)), outer.constant(0, index_type(batch))};
  Values out = counted_loop(outer, k, start, [&](Builder& b, const Value& j, const Values& state) {
    Value a = state[0];
    auto per_matrix = [&](const Value& v) { return b.broadcast_in_dim(v, a.type.dims, leading(rank - 2)); };
    Value p = b.broadcast_in_dim(j, batch, {});
    if (pivot) {  // the first row at or below j with the largest magnitude in column j
      Value column = slice_at(b, a, rank - 1, j), column_rows = b.iota(index_type(column_dims), rank - 2);
      Value size = magnitude(b, column);
      Value candidates = b.select(positions(b, column_dims, rank - 2, Compare::kGE, j), size, b.constant(-1, size.type));
      p = b.reduce({candidates, column_rows}, {b.constant(-INFINITY, {size.type.dtype, {}}), b.constant(0, {DType::kS64, {}})},
                   {rank - 2}, extreme_with_index(true, size.type.dtype))[1];
      Value row_p = entry_at(b, a, rank - 2, p), row_j = slice_at(b, a, rank - 2, j);
      std::vector<int64_t> row_map = leading(rank - 2);
      row_map.push_back(rank - 1);
      Value is_p = b.compare(Compare::kEQ, b.iota(index_type(a.type.dims), rank - 2), per_matrix(p));
      a = b.select(positions(b, a.type.dims, rank - 2, Compare::kEQ, j), b.broadcast_in_dim(row_p, a.type.dims, row_map),
                   b.select(is_p, b.broadcast_in_dim(row_j, a.type.dims, row_map), a));
    }
    Value pivots = b.select(positions(b, pivot_dims, rank - 2, Compare::kEQ, j),
                            b.broadcast_in_dim(p, pivot_dims, leading(rank - 2)), state[1]);
    // Multipliers below the pivot (left unscaled when the pivot is 0, as LAPACK), then the
    // rank-1 update of the trailing block.
    Value pivot_value = per_matrix(slice_at(b, slice_at(b, a, rank - 2, j), rank - 2, j));
    Value zero_pivot = b.compare(Compare::kEQ, pivot_value, b.constant(0, pivot_value.type));
    Value below_j = positions(b, a.type.dims, rank - 2, Compare::kGT, j);
    Value in_column = b.binary(BinaryOp::kAnd, below_j, positions(b, a.type.dims, rank - 1, Compare::kEQ, j));
    a = b.select(in_column, b.select(zero_pivot, a, a / pivot_value), a);
    std::vector<int64_t> as_column = leading(rank - 2), as_row = leading(rank - 2);
    as_column.push_back(rank - 2);
    as_row.push_back(rank - 1);
    Value multipliers = b.broadcast_in_dim(slice_at(b, a, rank - 1, j), a.type.dims, as_column);
    Value pivot_row = b.broadcast_in_dim(slice_at(b, a, rank - 2, j), a.type.dims, as_row);
    Value trailing = b.binary(BinaryOp::kAnd, below_j, positions(b, a.type.dims, rank - 1, Compare::kGT, j));
    a = b.select(trailing, a - multipliers * pivot_row, a);
    Value info = state[2];
    Value first_zero = b.binary(BinaryOp::kAnd, b.compare(Compare::kEQ, info, b.constant(0, info.type)),
                                slice_at(b, slice_at(b, zero_pivot, rank - 2, j), rank - 2, j));
    Value column_number = b.broadcast_in_dim(j + b.constant(1, j.type), batch, {});
    return Values{a, pivots, b.select(first_zero, column_number, info)};
  });
  return {out[0], out[1], outer.convert(out[2], DType::kS32)};
}

// The row permutation the pivots describe: perm[i] is the row of A that row i of L U holds.
Value permutation(Builder& outer, const Value& pivots, int64_t m) {
  int64_t rank = pivots.type.rank(), k = pivots.type.dims.back();
  std::vector<int64_t> dims(pivots.type.dims.begin(), pivots.type.dims.end() - 1);
  dims.push_back(m);
  Value identity = outer.iota(index_type(dims), rank - 1);
  return counted_loop(outer, k, {identity, pivots}, [&](Builder& b, const Value& j, const Values& state) {
    Value perm = state[0], p = slice_at(b, state[1], rank - 1, j);
    std::vector<int64_t> lead = leading(rank - 1);
    Value p_b = b.broadcast_in_dim(p, dims, lead);
    Value at_p = b.broadcast_in_dim(entry_at(b, perm, rank - 1, p), dims, lead);
    Value at_j = b.broadcast_in_dim(slice_at(b, perm, rank - 1, j), dims, lead);
    Value is_p = b.compare(Compare::kEQ, b.iota(index_type(dims), rank - 1), p_b);
    return Values{b.select(positions(b, dims, rank - 1, Compare::kEQ, j), at_p, b.select(is_p, at_j, perm)), state[1]};
  })[0];
}

// P with A = P L U: P[r, c] = 1 where r == perm[c].
Value permutation_matrix(Builder& b, const Value& perm, DType dtype) {
  int64_t rank = perm.type.rank(), m = perm.type.dims.back();
  std::vector<int64_t> dims = perm.type.dims;
  dims.push_back(m);
  std::vector<int64_t> map = leading(rank - 1);
  map.push_back(rank);
  Value r = b.iota(index_type(dims), rank - 1);
  return b.convert(b.compare(Compare::kEQ, r, b.broadcast_in_dim(perm, dims, map)), dtype);
}

// Solves A X = B (A^H X = B when `adjoint`) from A's LU factors; B [..., n, k].
Value lu_solve(Builder& b, const Lu& f, const Value& rhs, bool adjoint_a) {
  using T = Builder::TransposeA;
  Value p = permutation_matrix(b, permutation(b, f.pivots, f.lu.type.dims.back()), rhs.type.dtype);
  if (!adjoint_a) {  // L U X = P^T B
    Value y = b.triangular_solve(f.lu, matmul(transpose_last(b, p), rhs), true, true, true, T::kNo);
    return b.triangular_solve(f.lu, y, true, false, false, T::kNo);
  }
  Value y = b.triangular_solve(f.lu, rhs, true, false, false, T::kAdjoint);  // U^H L^H P^T X = B
  return matmul(p, b.triangular_solve(f.lu, y, true, true, true, T::kAdjoint));
}

// X A = B (left = false) as A^H X^H = B^H.
Value solve(Builder& b, const Lu& f, const Value& rhs, bool left, bool adjoint_a) {
  if (left) return lu_solve(b, f, rhs, adjoint_a);
  return adjoint(b, lu_solve(b, f, adjoint(b, rhs), !adjoint_a));
}

// (-1)^(number of actual row swaps).
Value permutation_sign(Builder& b, const Value& pivots, DType dtype) {
  int64_t rank = pivots.type.rank();
  Value swapped = b.compare(Compare::kNE, pivots, b.iota(pivots.type, rank - 1));
  Value flips = b.reduce({b.convert(swapped, DType::kS64)}, {b.constant(0, {DType::kS64, {}})}, {rank - 1},
                         combine_with(BinaryOp::kAdd))[0];
  Value odd = b.compare(Compare::kNE, b.binary(BinaryOp::kRemainder, flips, b.constant(2, flips.type)),
                        b.constant(0, flips.type));
  return b.select(odd, b.constant(-1, {dtype, flips.type.dims}), b.constant(1, {dtype, flips.type.dims}));
}

Value product(Builder& b, const Value& x, int64_t dim) {
  return b.reduce({x}, {b.constant(1, {x.type.dtype, {}})}, {dim}, combine_with(BinaryOp::kMultiply))[0];
}

Value one_based(Builder& b, const Value& pivots) {
  return b.convert(pivots + b.constant(1, pivots.type), DType::kS32);
}

Value zero_based(Builder& b, const Value& pivots) {
  Value p = cast(b, pivots, DType::kS64);
  return p - b.constant(1, p.type);
}

bool empty(const hlo::TensorType& t) { return t.element_count() == 0; }


const char kSingular[] = "linalg.solve: The solver failed because the input matrix is singular.";

}  // namespace

TORCHTPU_LOWERINGS(lu) {
  // linalg_lu_factor_ex(A, pivot, check_errors) -> (LU, pivots (1-based), info)
  register_lowering({"linalg_lu_factor_ex", "linalg_lu_factor_ex.out"}, [](LoweringContext& c) {
    if (empty(c.out(0))) return Values{c.b.constant(0, c.out(0)), c.b.constant(1, c.out(1)), c.b.constant(0, c.out(2))};
    Lu f = factor(c.b, c.input(0), c.arg(1).toBool());
    if (c.arg(2).toBool()) c.check_on_device(all_in_range(c.b, f.info, 1));
    return Values{f.lu, one_based(c.b, f.pivots), f.info};
  }, checked("torch.linalg.lu_factor_ex: the factorization could not be completed (a zero pivot)"));
  // lu_unpack(LU, pivots, unpack_data, unpack_pivots) -> (P, L, U)
  register_lowering({"lu_unpack", "lu_unpack.out"}, [](LoweringContext& c) {
    Value lu = c.input(0);
    int64_t m = lu.type.dims[lu.type.rank() - 2], n = lu.type.dims.back(), k = std::min(m, n);
    Values out;
    if (empty(c.out(0))) out.push_back(c.b.constant(0, c.out(0)));
    else out.push_back(permutation_matrix(c.b, permutation(c.b, zero_based(c.b, c.input_uncast(1)), m), c.out(0).dtype));
    if (empty(c.out(1)) || empty(c.out(2))) return Values{out[0], c.b.constant(0, c.out(1)), c.b.constant(0, c.out(2))};
    std::vector<int64_t> start(lu.type.rank(), 0), l_limit = lu.type.dims, u_limit = lu.type.dims, step(lu.type.rank(), 1);
    l_limit.back() = k;
    u_limit[lu.type.rank() - 2] = k;
    Value l = c.b.slice(lu, start, l_limit, step);
    l = triangle(c.b, l, true, -1) + identity(c.b, l.type);
    out.push_back(l);
    out.push_back(triangle(c.b, c.b.slice(lu, start, u_limit, step), false));
    return out;
  });
  // linalg_lu(A, pivot) -> (P, L, U)
  register_lowering({"linalg_lu", "linalg_lu.out"}, [](LoweringContext& c) {
    if (empty(c.out(1)) || empty(c.out(2))) return Values{c.b.constant(0, c.out(0)), c.b.constant(0, c.out(1)), c.b.constant(0, c.out(2))};
    Value a = c.input(0);
    int64_t m = a.type.dims[a.type.rank() - 2], n = a.type.dims.back(), k = std::min(m, n);
    Lu f = factor(c.b, a, c.arg(1).toBool());
    std::vector<int64_t> start(a.type.rank(), 0), l_limit = a.type.dims, u_limit = a.type.dims, step(a.type.rank(), 1);
    l_limit.back() = k;
    u_limit[a.type.rank() - 2] = k;
    Value l = c.b.slice(f.lu, start, l_limit, step);
    Value p = c.arg(1).toBool() ? permutation_matrix(c.b, permutation(c.b, f.pivots, m), c.out(0).dtype) : c.b.constant(0, c.out(0));
    return Values{p, triangle(c.b, l, true, -1) + identity(c.b, l.type),
                  triangle(c.b, c.b.slice(f.lu, start, u_limit, step), false)};
  });
  // linalg_lu_solve(LU, pivots, B, left, adjoint)
  register_lowering({"linalg_lu_solve", "linalg_lu_solve.out"}, [](LoweringContext& c) {
    if (empty(c.out())) return Values{c.b.constant(0, c.out())};
    auto batch = batch_of(c.out());
    Value lu = with_batch(c.b, c.input(0), batch), rhs = with_batch(c.b, c.input(2), batch);
    std::vector<int64_t> pivot_dims = batch;
    pivot_dims.push_back(c.input_uncast(1).type.dims.back());
    Lu f{lu, broadcast_to(c.b, zero_based(c.b, c.input_uncast(1)), pivot_dims), {}};
    return Values{solve(c.b, f, rhs, c.arg(3).toBool(), c.arg(4).toBool())};
  });
  // _linalg_solve_ex(A, B, left, check_errors) -> (X, LU, pivots, info); B may be a (batch of)
  // vector(s), solved as one column.
  register_lowering({"_linalg_solve_ex", "_linalg_solve_ex.result"}, [](LoweringContext& c) {
    if (empty(c.out(1))) return Values{c.b.constant(0, c.out(0)), c.b.constant(0, c.out(1)), c.b.constant(1, c.out(2)), c.b.constant(0, c.out(3))};
    auto batch = batch_of(c.out(1));
    Value a = with_batch(c.b, c.input(0), batch), rhs = c.input(1);
    bool left = c.arg(2).toBool();
    std::vector<int64_t> a_dims = c.input_uncast(0).type.dims;  // PyTorch's vector case: B is A's shape less one
    bool vector = rhs.type.rank() == 1 || std::vector<int64_t>(a_dims.begin(), a_dims.end() - 1) == rhs.type.dims;
    if (vector) {
      std::vector<int64_t> column = rhs.type.dims;
      column.insert(left ? column.end() : column.end() - 1, 1);
      rhs = c.b.reshape(rhs, column);
    }
    Lu f = factor(c.b, a, true);
    if (c.arg(3).toBool()) c.check_on_device(all_in_range(c.b, f.info, 1));
    Value x = solve(c.b, f, with_batch(c.b, rhs, batch), left, false);
    return Values{c.b.reshape(x, c.out(0).dims), f.lu, one_based(c.b, f.pivots), f.info};
  }, checked(kSingular));
  // linalg_inv_ex(A, check_errors) -> (inverse, info)
  register_lowering({"linalg_inv_ex", "linalg_inv_ex.inverse"}, [](LoweringContext& c) {
    if (empty(c.out(0))) return Values{c.b.constant(0, c.out(0)), c.b.constant(0, c.out(1))};
    Value a = c.input(0);
    Lu f = factor(c.b, a, true);
    if (c.arg(1).toBool()) c.check_on_device(all_in_range(c.b, f.info, 1));
    return Values{lu_solve(c.b, f, identity(c.b, a.type), false), f.info};
  }, checked("linalg.inv: The diagonal element is zero, the inversion could not be completed because the input matrix is singular."));
  // _linalg_det(A) -> (det, LU, pivots): the product of U's diagonal, signed by the permutation.
  register_lowering({"_linalg_det", "_linalg_det.result"}, [](LoweringContext& c) {
    Value a = c.input(0);
    if (empty(c.out(1))) return Values{c.b.constant(1, c.out(0)), c.b.constant(0, c.out(1)), c.b.constant(1, c.out(2))};
    Lu f = factor(c.b, as_det_factors_it(c, a), true);
    Value d = product(c.b, diagonal(c.b, f.lu), a.type.rank() - 2);
    return Values{d * permutation_sign(c.b, f.pivots, d.type.dtype), f.lu,
                  one_based(c.b, f.pivots)};
  });
  // _linalg_slogdet(A) -> (sign, logabsdet, LU, pivots)
  register_lowering({"_linalg_slogdet", "_linalg_slogdet.sign"}, [](LoweringContext& c) {
    Value a = c.input(0);
    if (empty(c.out(2))) return Values{c.b.constant(1, c.out(0)), c.b.constant(0, c.out(1)), c.b.constant(0, c.out(2)), c.b.constant(1, c.out(3))};
    Lu f = factor(c.b, as_det_factors_it(c, a), true);
    Value d = diagonal(c.b, f.lu);
    Value size = c.b.unary(UnaryOp::kAbs, d);  // real for complex d
    Value unit = is_complex(d.type.dtype) ? d / c.b.convert(size, d.type.dtype)
                                           : c.b.unary(UnaryOp::kSign, d);
    int64_t dim = a.type.rank() - 2;
    Value sign = product(c.b, unit, dim) * permutation_sign(c.b, f.pivots, d.type.dtype);
    Value log_size = c.b.reduce({c.b.unary(UnaryOp::kLog, size)}, {c.b.constant(0, {size.type.dtype, {}})}, {dim},
                                combine_with(BinaryOp::kAdd))[0];
    Value singular = c.b.compare(Compare::kEQ, log_size, c.b.constant(-INFINITY, log_size.type));
    sign = c.b.select(singular, c.b.constant(0, sign.type), sign);
    return Values{sign, log_size, f.lu, one_based(c.b, f.pivots)};
  });
}

}  // namespace torchtpu::aten
