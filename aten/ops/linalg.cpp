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
  // PyTorch's default float32 matmul precision is "highest" (no TF32): c.precision() says.
  return c.b.dot_general(a, b, {bd, bd, {a.type.rank() - 1}, {rhs_contract}}, accumulator(c.out().dtype),
                         c.precision());
}

// beta * self + alpha * product, with PyTorch's rule that beta == 0 ignores self (even NaN).
// beta is a runtime value, so the rule is a select in the program. Computed in the product's
// (accumulator) dtype and rounded once, as on CPU.
Value affine(LoweringContext& c, const Value& product, size_t self, size_t beta, size_t alpha) {
  DType acc = product.type.dtype;
  Value p = c.b.binary(BinaryOp::kMultiply, c.bcast(product), c.bcast(c.in_as(alpha, acc)));
  Value b = c.in_as(beta, acc);
  Value scaled_self = c.b.binary(BinaryOp::kMultiply, c.bcast(c.in_as(self, acc)), c.bcast(b));
  Value beta_is_zero = c.b.compare(hlo::Compare::kEQ, b, c.full(0, b));
  scaled_self = c.b.select(beta_is_zero, c.full(0, scaled_self), scaled_self);
  return c.b.binary(BinaryOp::kAdd, scaled_self, p);
}

// tril/triu: keeps the elements on and below (lower) or above (upper) diagonal k of the last
// two dimensions, zeroing the rest.
V triangle(LoweringContext& c, bool lower) {
  Value x = c.in(0);
  int64_t k = c.arg(1).toInt(), rank = x.type.rank();
  hlo::TensorType index{DType::kS64, x.type.dims};
  Value offset = c.b.binary(BinaryOp::kSubtract, c.b.iota(index, rank - 1), c.b.iota(index, rank - 2));
  Value keep = c.b.compare(lower ? Compare::kLE : Compare::kGE, offset, c.b.constant_int(k, index));
  return {c.b.select(keep, x, c.full(0, x))};
}

// A matmul whose tensor operands (from `first` on) have one dtype: CPU has no mixed-dtype kernels
// and raises, while PyTorch's meta kernels would promote. CPU's batched and matrix-vector kernels
// return before checking when an operand is empty (`empty_ok`), and so does this check.
LoweringOptions same_dtype_matmul(size_t first, bool empty_ok = false) {
  LoweringOptions o = matmul_op();
  o.meta = checked_meta([first, empty_ok](const std::vector<c10::IValue>& args) {
    const at::Tensor& a = args[first].toTensor();
    const at::Tensor& b = args[first + 1].toTensor();
    if (empty_ok && (a.numel() == 0 || b.numel() == 0)) return;
    TORCH_CHECK(a.scalar_type() == b.scalar_type(), "expected m1 and m2 to have the same dtype, but got: ",
                a.scalar_type(), " != ", b.scalar_type());
  });
  return o;
}

}  // namespace

TORCHTPU_LOWERINGS(linalg) {
  register_lowering({"tril", "tril_", "tril.out"}, [](LoweringContext& c) { return triangle(c, true); });
  register_lowering({"triu", "triu_", "triu.out"}, [](LoweringContext& c) { return triangle(c, false); });
  register_lowering({"mm", "mm.out"}, [](LoweringContext& c) {
    return V{matmul(c, c.in(0), c.in(1), 0, 0)};
  }, same_dtype_matmul(0));
  register_lowering({"bmm", "bmm.out"}, [](LoweringContext& c) {
    return V{matmul(c, c.in(0), c.in(1), 1, 1)};
  }, same_dtype_matmul(0, true));
  register_lowering({"dot", "dot.out", "vdot", "vdot.out"}, [](LoweringContext& c) {
    return V{matmul(c, c.in(0), c.in(1), 0, 0)};
  }, same_dtype_matmul(0));
  register_lowering({"mv", "mv.out"}, [](LoweringContext& c) {
    return V{matmul(c, c.in(0), c.in(1), 0, 0)};
  }, same_dtype_matmul(0, true));
  // addmm(self, mat1, mat2, *, beta, alpha)
  register_lowering({"addmm", "addmm_", "addmm.out"}, [](LoweringContext& c) {
    return V{affine(c, matmul(c, c.in(1), c.in(2), 0, 0), 0, 3, 4)};
  }, same_dtype_matmul(1));
  register_lowering({"baddbmm", "baddbmm_", "baddbmm.out"}, [](LoweringContext& c) {
    return V{affine(c, matmul(c, c.in(1), c.in(2), 1, 1), 0, 3, 4)};
  }, same_dtype_matmul(1, true));
  register_lowering({"addmv", "addmv_", "addmv.out"}, [](LoweringContext& c) {
    return V{affine(c, matmul(c, c.in(1), c.in(2), 0, 0), 0, 3, 4)};
  }, same_dtype_matmul(1, true));
}

}  // namespace torchtpu::aten
