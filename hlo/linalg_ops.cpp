// Dense linear algebra XLA implements itself: Cholesky factorization and triangular solves, both
// batched over leading dimensions.
#include "hlo/attributes.h"
#include "hlo/builder.h"

namespace torchtpu::hlo {

Value Builder::cholesky(const Value& a, bool lower) {
  require(a.type.rank() >= 2 && a.type.dims.back() == a.type.dims[a.type.rank() - 2],
          "cholesky takes square matrices: " + a.type.str());
  return emit1("stablehlo.cholesky", {a}, a.type, std::string("lower = ") + (lower ? "true" : "false"));
}

Value Builder::triangular_solve(const Value& a, const Value& b, bool left_side, bool lower, bool unit_diagonal,
                                TransposeA transpose_a) {
  static constexpr const char* kTranspose[] = {"NO_TRANSPOSE", "TRANSPOSE", "ADJOINT"};
  int64_t rank = b.type.rank();
  require(a.type.rank() == rank && rank >= 2, "triangular_solve operands differ in rank");
  int64_t n = a.type.dims.back();
  require(a.type.dims[rank - 2] == n && b.type.dims[left_side ? rank - 2 : rank - 1] == n,
          "triangular_solve: a must be square and match b: " + a.type.str() + " vs " + b.type.str());
  auto flag = [](bool v) { return v ? "true" : "false"; };
  return emit1("stablehlo.triangular_solve", {a, b}, b.type,
               std::string("left_side = ") + flag(left_side) + ", lower = " + flag(lower) +
                   ", unit_diagonal = " + flag(unit_diagonal) + ", transpose_a = #stablehlo<transpose " +
                   kTranspose[static_cast<int>(transpose_a)] + ">");
}

}  // namespace torchtpu::hlo
