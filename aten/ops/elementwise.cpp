// Element-wise arithmetic. Output metadata follows PyTorch's own rules (type promotion,
// broadcasting), so results and error messages match CPU PyTorch.
#include <ATen/ExpandUtils.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/result_type.h>
#include <torch/library.h>

#include <cstdio>

#include "aten/ops/lowering_util.h"
#include "aten/tensor_operand.h"
#include "exec/executor.h"

namespace torchtpu::aten {
namespace {

std::string exact(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%a", v);
  return buf;
}

at::Tensor add(const at::Tensor& self, const at::Tensor& other, const c10::Scalar& alpha) {
  c10::ScalarType dtype = at::result_type(self, other);
  at::Tensor out = at::empty(at::infer_size(self.sizes(), other.sizes()),
                             self.options().dtype(dtype));
  std::vector<int64_t> sizes = out.sizes().vec();
  DType dt = to_dtype(dtype);
  double a = alpha.toDouble();
  exec::run({"add|" + exact(a),
             [=](hlo::Builder& b, const std::vector<hlo::Value>& in) {
               hlo::Value x = broadcast_to(b, cast(b, in[0], dt), sizes);
               hlo::Value y = broadcast_to(b, cast(b, in[1], dt), sizes);
               if (a != 1) y = b.binary(hlo::BinaryOp::kMultiply, y, b.constant(a, y.type));
               return std::vector<hlo::Value>{b.binary(hlo::BinaryOp::kAdd, x, y)};
             },
             {operand(self), operand(other.device() == self.device() ? other : other.to(self.device()))},
             {operand(out)}});
  return out;
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) { m.impl("add.Tensor", add); }

}  // namespace
}  // namespace torchtpu::aten
