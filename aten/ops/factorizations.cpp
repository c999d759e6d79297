// Matrix factorizations and the solves built on them: Cholesky (XLA's own), triangular solves
// (XLA's own), and what PyTorch composes from them (cholesky_solve, cholesky_inverse). Batched
// over leading dimensions, which broadcast between operands as in PyTorch.
#include "aten/lowering.h"
#include "aten/ops/matrix_util.h"

namespace torchtpu::aten {
namespace {

// The lower Cholesky factor of each matrix.
Value cholesky_lower(Builder& b, const Value& a) { return triangle(b, b.cholesky(a, true), true); }

// The info of a Cholesky factorization: 0 when it succeeded. LAPACK's is otherwise the order of
// the first leading minor that is not positive-definite, found where the factor's diagonal stops
// being a positive number; XLA leaves an all-NaN factor instead of a partial one, so this gives 1.
Value cholesky_info(Builder& b, const Value& l) {
  int64_t rank = l.type.rank(), n = l.type.dims.back();
  hlo::TensorType index{DType::kS64, l.type.dims};
  Value on_diagonal = b.compare(Compare::kEQ, b.iota(index, rank - 2), b.iota(index, rank - 1));
  Value d = is_complex(l.type.dtype) ? b.unary(UnaryOp::kReal, l) : l;
  Value bad = b.binary(BinaryOp::kAnd, on_diagonal, b.unary(UnaryOp::kNot, b.compare(Compare::kGT, d, b.constant(0, d.type))));
  Value first = b.select(bad, b.iota(index, rank - 1), b.constant_int(n, index));
  first = b.reduce({first}, {b.constant_int(n, {DType::kS64, {}})}, {rank - 2, rank - 1},
                   combine_with(BinaryOp::kMinimum))[0];
  Value info = b.select(b.compare(Compare::kEQ, first, b.constant_int(n, first.type)), b.constant(0, first.type),
                        first + b.constant(1, first.type));
  return b.convert(info, DType::kS32);
}

// Solves A X = B for X given A's Cholesky factor (lower L: A = L L^H; upper U: A = U^H U).
Value cholesky_solve(Builder& b, const Value& factor, const Value& rhs, bool upper) {
  using T = Builder::TransposeA;
  Value y = b.triangular_solve(factor, rhs, true, !upper, false, upper ? T::kAdjoint : T::kNo);
  return b.triangular_solve(factor, y, true, !upper, false, upper ? T::kNo : T::kAdjoint);
}

bool empty(const hlo::TensorType& t) { return t.element_count() == 0; }

const char kNotPositiveDefinite[] =
    "linalg.cholesky: The factorization could not be completed because the input is not positive-definite.";

// linalg_cholesky_ex(self, upper, check_errors) -> (L, info)
Values cholesky_ex(LoweringContext& c) {
  if (empty(c.out(0))) return {c.b.constant(0, c.out(0)), c.b.constant(0, c.out(1))};
  Value l = cholesky_lower(c.b, c.input(0));
  Value info = cholesky_info(c.b, l);
  if (c.arg(2).toBool()) c.check_on_device(all_in_range(c.b, info, 1));
  return {c.arg(1).toBool() ? adjoint(c.b, l) : l, info};
}

// linalg_solve_triangular(A, B, upper, left, unitriangular)
Values solve_triangular(LoweringContext& c) {
  if (empty(c.out())) return {c.b.constant(0, c.out())};
  auto batch = batch_of(c.out());
  Value a = with_batch(c.b, c.input(0), batch), rhs = with_batch(c.b, c.input(1), batch);
  return {c.b.triangular_solve(a, rhs, c.arg(3).toBool(), !c.arg(2).toBool(), c.arg(4).toBool(),
                               Builder::TransposeA::kNo)};
}

// triangular_solve(B, A, upper, transpose, unitriangular) -> (X, A broadcast)
Values triangular_solve(LoweringContext& c) {
  auto batch = batch_of(c.out(0));
  Value a = with_batch(c.b, c.input_as(1, c.out(0).dtype), batch);
  if (empty(c.out(0))) return {c.b.constant(0, c.out(0)), a};
  Value rhs = with_batch(c.b, c.input(0), batch);
  auto transpose = c.arg(3).toBool() ? Builder::TransposeA::kTranspose : Builder::TransposeA::kNo;
  return {c.b.triangular_solve(a, rhs, true, !c.arg(2).toBool(), c.arg(4).toBool(), transpose), a};
}

}  // namespace

TORCHTPU_LOWERINGS(factorizations) {
  register_lowering({"linalg_cholesky_ex", "linalg_cholesky_ex.L"}, cholesky_ex, checked(kNotPositiveDefinite));
  register_lowering({"cholesky", "cholesky.out"}, [](LoweringContext& c) {
    if (empty(c.out())) return Values{c.b.constant(0, c.out())};
    Value l = cholesky_lower(c.b, c.input(0));
    c.check_on_device(all_in_range(c.b, cholesky_info(c.b, l), 1));
    return Values{c.arg(1).toBool() ? adjoint(c.b, l) : l};
  }, in_some_releases(checked(kNotPositiveDefinite)));
  register_lowering({"linalg_solve_triangular", "linalg_solve_triangular.out"}, solve_triangular);
  register_lowering({"triangular_solve", "triangular_solve.X"}, triangular_solve);
  register_lowering({"_cholesky_solve_helper", "_cholesky_solve_helper.out"}, [](LoweringContext& c) {
    if (empty(c.out())) return Values{c.b.constant(0, c.out())};
    auto batch = batch_of(c.out());  // (B, factor, upper)
    return Values{cholesky_solve(c.b, with_batch(c.b, c.input(1), batch), with_batch(c.b, c.input(0), batch), c.arg(2).toBool())};
  });
  register_lowering({"cholesky_inverse", "cholesky_inverse.out"}, [](LoweringContext& c) {
    if (empty(c.out())) return Values{c.b.constant(0, c.out())};
    Value factor = c.input(0);  // (factor, upper): the inverse of the matrix it factors
    return Values{cholesky_solve(c.b, factor, identity(c.b, factor.type), c.arg(1).toBool())};
  });
}

}  // namespace torchtpu::aten
