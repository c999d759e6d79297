// Matrix products: mm, bmm, addmm, baddbmm, dot, addmv/mv. Low-precision inputs accumulate in f32
// (dot_general's result type), matching PyTorch CPU.
#include "aten/lowering.h"
#include "aten/ops/lowering_util.h"

namespace torchtpu::aten {
namespace {

// Contracts the last dimension of `a` with dimension `rhs_contract` of `b`, batching the leading
// `batch` dimensions.
Value matmul(LoweringContext& c, const Value& a, const Value& b, int64_t batch, int64_t rhs_contract) {
  std::vector<int64_t> bd;
  for (int64_t i = 0; i < batch; ++i) bd.push_back(i);
  // Full precision: PyTorch's default float32 matmul precision is "highest" (no TF32).
  return c.b.dot_general(a, b, {bd, bd, {a.type.rank() - 1}, {rhs_contract}},
                         accumulator(c.out().dtype), hlo::Builder::Precision::kHighest);
}

// beta * self + alpha * product, with PyTorch's rule that beta == 0 ignores self (even NaN).
// beta is a runtime value, so the rule is a select in the program.
Value affine(LoweringContext& c, const Value& product, size_t self, size_t beta, size_t alpha) {
  Value p = c.bcast(cast(c.b, product, c.out().dtype));
  p = c.b.binary(BinaryOp::kMultiply, p, c.bcast(c.in(alpha)));
  Value b = c.in(beta);
  Value scaled_self = c.b.binary(BinaryOp::kMultiply, c.in_b(self), c.bcast(b));
  Value beta_is_zero = c.b.compare(hlo::Compare::kEQ, b, c.full(0, b));
  scaled_self = c.b.select(beta_is_zero, c.full(0, scaled_self), scaled_self);
  return c.b.binary(BinaryOp::kAdd, scaled_self, p);
}

}  // namespace

TORCHTPU_LOWERINGS(linalg) {
  register_lowering({"mm", "mm.out"}, [](LoweringContext& c) {
    return V{matmul(c, c.in(0), c.in(1), 0, 0)};
  });
  register_lowering({"bmm", "bmm.out"}, [](LoweringContext& c) {
    return V{matmul(c, c.in(0), c.in(1), 1, 1)};
  });
  register_lowering({"dot", "dot.out", "vdot", "vdot.out"}, [](LoweringContext& c) {
    return V{matmul(c, c.in(0), c.in(1), 0, 0)};
  });
  register_lowering({"mv", "mv.out"}, [](LoweringContext& c) {
    return V{matmul(c, c.in(0), c.in(1), 0, 0)};
  });
  // addmm(self, mat1, mat2, *, beta, alpha)
  register_lowering({"addmm", "addmm_", "addmm.out"}, [](LoweringContext& c) {
    return V{affine(c, matmul(c, c.in(1), c.in(2), 0, 0), 0, 3, 4)};
  });
  register_lowering({"baddbmm", "baddbmm_", "baddbmm.out"}, [](LoweringContext& c) {
    return V{affine(c, matmul(c, c.in(1), c.in(2), 1, 1), 0, 3, 4)};
  });
  register_lowering({"addmv", "addmv_", "addmv.out"}, [](LoweringContext& c) {
    return V{affine(c, matmul(c, c.in(1), c.in(2), 0, 0), 0, 3, 4)};
  });
}

}  // namespace torchtpu::aten
