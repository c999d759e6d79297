// Matrix products (mm, bmm, addmm, baddbmm, addbmm, dot, vdot, addmv/mv), cross products, tril/triu,
// linear combinations of matrices.
// Low-precision inputs accumulate in f32 (dot_general's result type), matching PyTorch CPU.
#include <ATen/ops/empty.h>

#include "aten/lowering.h"
#include "aten/ops/math.h"
#include "aten/ops/matrix_util.h"

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
  Value p = c.broadcast_to_output(product) * c.broadcast_to_output(c.input_as(alpha, acc));
  Value b = c.input_as(beta, acc);
  Value scaled_self = c.broadcast_to_output(c.input_as(self, acc)) * c.broadcast_to_output(b);
  Value beta_is_zero = c.b.compare(hlo::Compare::kEQ, b, c.full(0, b));
  scaled_self = c.b.select(beta_is_zero, c.full(0, scaled_self), scaled_self);
  return scaled_self + p;
}

// addbmm(self, batch1, batch2, *, beta, alpha). CPU runs addmm of self and the first product (beta
// applied), then adds each further product (addmm_ with beta 1), rounding the running sum to the
// output dtype each time: bfloat16/float16 results show it, so those follow it. Other types: one
// contraction over (batch, k) (in float32 as close to CPU's as its own order of summation).
Values addbmm(LoweringContext& c) {
  DType out = c.out().dtype, acc = accumulator(out);
  Value products = matmul(c, c.input(1), c.input(2), 1, 1);  // [B, n, p]
  int64_t batches = products.type.dims[0];
  if (batches == 0 || acc == out) {
    Value product = c.b.dot_general(c.input(1), c.input(2), {{}, {}, {0, 2}, {0, 1}}, acc, c.precision());
    return {affine(c, product, 0, 3, 4)};
  }
  Value sum = rounded_to(c.b, affine(c, take_slice(c.b, products, 0, 0), 0, 3, 4), out);
  Values state = counted_loop(c.b, batches - 1, {sum, products, c.input_as(4, acc)}, [&](Builder& b, const Value& i, const Values& s) {
    Value next = i + b.constant(1, i.type);
    Value term = slice_at(b, s[1], 0, next) * b.broadcast_in_dim(s[2], s[0].type.dims, {});
    return Values{rounded_to(b, s[0] + term, out), s[1], s[2]};
  });
  return {state[0]};
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

// linalg_cross(self, other, dim): the cross product of 3-vectors along dim (operands broadcast).
// In bfloat16/float16 CPU rounds each product and the difference to the dtype.
Values cross(LoweringContext& c) {
  DType dtype = c.out().dtype, acc = accumulator(dtype);
  Math m{c.b, low_precision(dtype)};
  Value a = cast(c.b, c.elementwise_input(0), acc), b = cast(c.b, c.elementwise_input(1), acc);
  int64_t dim = wrap_dim(c.arg(2).toInt(), a.type.rank());
  auto component = [&](const Value& v, int64_t i) {
    std::vector<int64_t> start(v.type.rank(), 0), limit = v.type.dims, step(v.type.rank(), 1);
    start[dim] = i;
    limit[dim] = i + 1;
    return c.b.slice(v, start, limit, step);
  };
  auto term = [&](int64_t i, int64_t j) {  // a_i b_j - a_j b_i
    return m.sub(m.mul(component(a, i), component(b, j)), m.mul(component(a, j), component(b, i)));
  };
  return {cast(c.b, c.b.concatenate({term(1, 2), term(2, 0), term(0, 1)}, dim), dtype)};
}

// _compute_linear_combination(input [n, ...], coefficients [m, n]) -> [m, ...]: output i is
// sum_j coefficients[i, j] * input[j] (what CPU's matrix_exp combines its powers with), in the
// input's dtype as CPU's kernel (which reads the coefficients as that dtype).
Values linear_combination(LoweringContext& c) {
  Value x = c.input(0), k = c.input_as(1, x.type.dtype);
  std::vector<int64_t> dims = x.type.dims, x_dims(dims.size());
  dims.insert(dims.begin(), k.type.dims[0]);  // [m, n, ...]
  for (size_t d = 0; d < x_dims.size(); ++d) x_dims[d] = static_cast<int64_t>(d) + 1;
  Value terms = c.b.broadcast_in_dim(x, dims, x_dims) * c.b.broadcast_in_dim(k, dims, {0, 1});
  return Values{Math{c.b}.sum(terms, {1})};
}

// CPU does not check that the coefficients' columns match the inputs (it reads what is there).
std::vector<c10::IValue> linear_combination_meta(const c10::FunctionSchema& schema,
                                                 const std::vector<c10::IValue>& args) {
  const at::Tensor &input = args[0].toTensor(), &coefficients = args[1].toTensor();
  TORCH_CHECK(coefficients.dim() == 2 && input.dim() >= 1 && coefficients.size(1) == input.size(0),
              "_compute_linear_combination: coefficients of shape ", coefficients.sizes(),
              " do not combine inputs of shape ", input.sizes());
  std::vector<int64_t> sizes = input.sizes().vec();
  sizes[0] = coefficients.size(0);
  if (!schema.arguments().back().is_out()) return {at::empty(sizes, input.options())};
  at::Tensor out = args.back().toTensor();
  out.resize_(sizes);
  return {out};
}

}  // namespace

TORCHTPU_LOWERINGS(linalg) {
  register_lowering({"_compute_linear_combination", "_compute_linear_combination.out"}, linear_combination,
                    with_meta(linear_combination_meta));
  register_lowering({"tril", "tril_", "tril.out"}, [](LoweringContext& c) {
    return Values{triangle(c.b, c.input(0), true, c.arg(1).toInt())};
  }, padded({}));  // positions count from the start, where padding leaves them
  register_lowering({"triu", "triu_", "triu.out"}, [](LoweringContext& c) {
    return Values{triangle(c.b, c.input(0), false, c.arg(1).toInt())};
  }, padded({}));
  // Zeros in the padding add nothing to a product; the rows of `self` are the result's.
  register_lowering({"mm", "mm.out"}, [](LoweringContext& c) {
    return Values{matmul(c, c.input(0), c.input(1), 0, 0)};
  }, padded(same_dtype_matmul(0), matmul_padding([](size_t arg) { return arg == 0; })));
  register_lowering({"_int_mm", "_int_mm.out"}, [](LoweringContext& c) {  // int8 operands, summed exactly in int32
    return Values{matmul(c, c.input(0), c.input(1), 0, 0)};
  });
  // int8 weight-only quantization: self [m, k] @ int8 mat2 [n, k]^T times per-row scales [n], in
  // float32 and rounded once, as CPU's kernel does.
  register_lowering({"_weight_int8pack_mm"}, [](LoweringContext& c) {
    DType acc = accumulator(c.out().dtype);
    Value product = matmul(c, c.input_as(0, acc), c.input_as(1, acc), 0, 1);
    return Values{product * c.broadcast_to_output(c.input_as(2, acc))};
  });
  // float8 matmul with per-tensor scales (_scaled_mm(self, mat2, scale_a, scale_b, bias,
  // scale_result, out_dtype, use_fast_accum)): in float32 as CPU's kernel, the product scaled by
  // scale_a * scale_b, the bias added, a float8 result divided by scale_result, rounded once.
  register_lowering({"_scaled_mm", "_scaled_mm.out"}, [](LoweringContext& c) {
    auto f32 = [&](size_t i) { return c.input_as(i, DType::kF32); };
    Value product = matmul(c, f32(0), f32(1), 0, 0);
    Value scale = f32(2) * f32(3);
    Value out = product * c.broadcast_to_output(scale);
    if (c.has(4)) out = out + c.broadcast_to_output(f32(4));
    bool float8 = c.out().dtype == DType::kF8E4M3FN || c.out().dtype == DType::kF8E5M2;
    if (float8 && c.has(5)) out = out / c.broadcast_to_output(f32(5));
    return Values{cast(c.b, out, c.out().dtype)};
  }, matmul_op());
  register_lowering({"bmm", "bmm.out"}, [](LoweringContext& c) {
    return Values{matmul(c, c.input(0), c.input(1), 1, 1)};
  }, padded(same_dtype_matmul(0, true), matmul_padding()));
  register_lowering({"dot", "dot.out"}, [](LoweringContext& c) {
    return Values{matmul(c, c.input(0), c.input(1), 0, 0)};
  }, padded(same_dtype_matmul(0), matmul_padding()));
  register_lowering({"vdot", "vdot.out"}, [](LoweringContext& c) {  // conjugates its first operand
    return Values{matmul(c, conj(c.b, c.input(0)), c.input(1), 0, 0)};
  }, padded(same_dtype_matmul(0), matmul_padding()));
  register_lowering({"addbmm", "addbmm_", "addbmm.out"}, addbmm, padded(same_dtype_matmul(1), matmul_padding()));
  register_lowering({"linalg_cross", "linalg_cross.out"}, cross);
  register_lowering({"mv", "mv.out"}, [](LoweringContext& c) {
    return Values{matmul(c, c.input(0), c.input(1), 0, 0)};
  }, padded(same_dtype_matmul(0, true), matmul_padding()));
  // addmm(self, mat1, mat2, *, beta, alpha)
  register_lowering({"addmm", "addmm_", "addmm.out"}, [](LoweringContext& c) {
    return Values{affine(c, matmul(c, c.input(1), c.input(2), 0, 0), 0, 3, 4)};
  }, padded(same_dtype_matmul(1), matmul_padding([](size_t arg) { return arg <= 1; })));
  register_lowering({"baddbmm", "baddbmm_", "baddbmm.out"}, [](LoweringContext& c) {
    return Values{affine(c, matmul(c, c.input(1), c.input(2), 1, 1), 0, 3, 4)};
  }, padded(same_dtype_matmul(1, true), matmul_padding()));
  register_lowering({"addmv", "addmv_", "addmv.out"}, [](LoweringContext& c) {
    return Values{affine(c, matmul(c, c.input(1), c.input(2), 0, 0), 0, 3, 4)};
  }, padded(same_dtype_matmul(1, true), matmul_padding()));
}

// The dtypes CPU's kernels refuse that PyTorch's meta kernels let through (aten/dtype_support.h),
// measured against CPU PyTorch 2.11.
TORCHTPU_LOWERINGS(linalg_cpu_refusals) {
  // CPU computes few ops in complex32 (add, sub, mul, neg, conj, abs, cat, fill_, copies, ...);
  // tpu computes every lowered op in complex64 and rounds (as CUDA's chalf kernels), except
  // these, which CPU refuses and PyTorch code meets (foreach ops with a complex Scalar).
  refuse_on_cpu("mm", {Refused::kComplexHalf, "addmm_impl_cpu_"});
  refuse_on_cpu("addmm", {Refused::kComplexHalf, "addmm_impl_cpu_"});
}

}  // namespace torchtpu::aten
