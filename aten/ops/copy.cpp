// Moving data between the host and tpu, and between tpu tensors: _copy_from, _local_scalar_dense.
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include "aten/ops/lowering_util.h"
#include "aten/tensor_operand.h"
#include "exec/executor.h"

namespace torchtpu::aten {
namespace {

bool is_tpu(const at::Tensor& t) { return t.device().type() == c10::DeviceType::PrivateUse1; }

// True when `t` is its storage's whole contents, densely: transfers can then skip any program.
bool spans_storage(const at::Tensor& t) {
  return t.is_contiguous() && t.storage_offset() == 0 &&
         t.numel() * t.element_size() == static_cast<int64_t>(t.storage().nbytes());
}

// Writes `src` (a tpu tensor broadcastable to dst) into the tpu view `dst`, converting dtype.
void copy_on_device(const at::Tensor& src, const at::Tensor& dst) {
  std::vector<int64_t> sizes = dst.sizes().vec();
  DType to = to_dtype(dst.scalar_type());
  exec::run({"copy", [sizes, to](hlo::Builder& b, const std::vector<hlo::Value>& in) {
               return std::vector<hlo::Value>{broadcast_to(b, cast(b, in[0], to), sizes)};
             },
             {operand(src)}, {operand(dst)}});
}

// A contiguous tpu tensor on `device` holding the host tensor `cpu` (already in the wanted dtype).
at::Tensor upload_contiguous(const at::Tensor& cpu, c10::Device device) {
  at::Tensor host = cpu.contiguous();
  at::Tensor out = at::empty(host.sizes(), host.options().device(device));
  if (host.numel() > 0) exec::upload(buffer_ref(out), host.data_ptr(), to_dtype(host.scalar_type()));
  return out;
}

// The tpu tensor `src` as a new contiguous host tensor of the same dtype.
at::Tensor download_contiguous(const at::Tensor& src) {
  at::Tensor dense = src;
  if (!spans_storage(src)) {
    dense = at::empty(src.sizes(), src.options());
    copy_on_device(src, dense);
  }
  at::Tensor host = at::empty(src.sizes(), src.options().device(c10::kCPU));
  if (host.numel() > 0) exec::download(buffer_ref(dense), host.data_ptr());
  return host;
}

at::Tensor copy_from(const at::Tensor& self, const at::Tensor& dst, bool non_blocking) {
  if (is_tpu(self) && is_tpu(dst)) {
    if (self.device() == dst.device()) {
      copy_on_device(self, dst);
    } else {  // between two tpu devices: through the host for now
      copy_on_device(upload_contiguous(download_contiguous(self), dst.device()), dst);
    }
  } else if (is_tpu(self)) {  // tpu -> cpu
    dst.copy_(download_contiguous(self));
  } else {  // cpu -> tpu
    at::Tensor host = self.to(dst.scalar_type()).expand(dst.sizes()).contiguous();
    if (spans_storage(dst) && dst.numel() > 0)
      exec::upload(buffer_ref(dst), host.data_ptr(), to_dtype(host.scalar_type()));
    else
      copy_on_device(upload_contiguous(host, dst.device()), dst);
  }
  return dst;
}

at::Tensor copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst) {
  dst.resize_(self.sizes());
  return copy_from(self, dst, false);
}

c10::Scalar local_scalar_dense(const at::Tensor& self) {
  return download_contiguous(self).item();
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_copy_from", copy_from);
  m.impl("_copy_from_and_resize", copy_from_and_resize);
  m.impl("_local_scalar_dense", local_scalar_dense);
}

}  // namespace
}  // namespace torchtpu::aten
