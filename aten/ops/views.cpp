// Alias ops: they only change sizes/strides/offset over the same storage, exactly as on CPU, so
// PyTorch's own metadata kernels serve; the data is read by whichever op consumes the view.
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/view_native.h>
#include <torch/library.h>

namespace torchtpu::aten {
namespace {

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("view", at::native::view);
  m.impl("as_strided", at::native::as_strided_tensorimpl);
  m.impl("_reshape_alias", at::native::_reshape_alias);
}

}  // namespace
}  // namespace torchtpu::aten
