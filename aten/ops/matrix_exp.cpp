// The matrix exponential by scaling and squaring: each matrix scaled by 2^-s so its 1-norm is at
// most 2 (s from the norm, per matrix), a Taylor polynomial by Horner's rule (degree 18 in single
// precision, 24 in double: truncation below 5e-12 and 3e-18 there), then s squarings in a while
// loop that leaves a matrix alone once its own count is done. Each squaring doubles the relative
// error, so the bound is as large as the degree allows. Low-precision inputs compute in float32.
#include <cmath>

#include "aten/lowering.h"
#include "aten/ops/math.h"
#include "aten/ops/matrix_util.h"

namespace torchtpu::aten {
namespace {

Values matrix_exp(LoweringContext& c) {
  Builder& b = c.b;
  Math m{b};
  Value a = c.input_as(0, accumulator(c.out().dtype));
  int64_t rank = a.type.rank();
  std::vector<int64_t> batch = batch_of(a.type), lead;
  for (int64_t d = 0; d < rank - 2; ++d) lead.push_back(d);
  Value norm = m.reduce(m.sum(b.unary(UnaryOp::kAbs, a), {rank - 2}), {rank - 2}, BinaryOp::kMaximum, 0);
  // s = ceil(log2(norm / 2)), at least 0; a non-finite norm stops at 1100 (past any finite float)
  Value s = b.unary(UnaryOp::kLog, norm * m.k(0.5, norm)) * m.k(1 / M_LN2, norm);
  s = b.clamp(m.k(0, s), b.unary(UnaryOp::kCeil, s), m.k(1100, s));
  s = b.select(is_nan(s), m.k(1100, s), s);
  Value scale = cast(b, b.binary(BinaryOp::kPower, m.k(2, s), s * m.k(-1, s)), a.type.dtype);
  Value scaled = a * b.broadcast_in_dim(scale, a.type.dims, lead);
  Value eye = identity(b, a.type), t = eye;
  bool double_precision = a.type.dtype == DType::kF64 || a.type.dtype == DType::kC128;
  for (int k = double_precision ? 24 : 18; k >= 1; --k) t = eye + matmul(scaled, t) / m.k(k, t);
  Value squarings = b.convert(s, DType::kS64);
  hlo::TensorType index{DType::kS64, {}};
  Value most = lead.empty() ? squarings
                            : b.reduce({squarings}, {b.constant(0, index)}, lead, combine_with(BinaryOp::kMaximum))[0];
  Values out = b.while_loop(
      {t, squarings, b.constant(0, index), most},
      [](Builder& rb, const Values& x) { return Values{rb.compare(Compare::kLT, x[2], x[3])}; },
      [&](Builder& rb, const Values& x) {  // (t, squarings, i, most)
        Value more = rb.compare(Compare::kLT, rb.broadcast_in_dim(x[2], x[1].type.dims, {}), x[1]);
        Value next = rb.select(rb.broadcast_in_dim(more, x[0].type.dims, lead), matmul(x[0], x[0]), x[0]);
        return Values{next, x[1], x[2] + rb.constant(1, index), x[3]};
      });
  return {cast(b, out[0], c.out().dtype)};
}

}  // namespace

TORCHTPU_LOWERINGS(matrix_exp) {
  register_lowering({"linalg_matrix_exp", "linalg_matrix_exp.out"}, matrix_exp);
}

}  // namespace torchtpu::aten
