// Moving data between the host and tpu, and between tpu tensors: _copy_from, _local_scalar_dense.
#include <ATen/MemoryOverlap.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include <algorithm>

#include "aten/device.h"
#include "aten/ops/lowering_util.h"
#include "aten/origin.h"
#include "aten/padded_upload.h"
#include "aten/pinned_memory.h"
#include "aten/tensor_operand.h"
#include "aten/varying_sizes.h"
#include "exec/executor.h"

namespace torchtpu::aten {
namespace {

bool is_tpu(const at::Tensor& t) { return t.device().type() == c10::DeviceType::PrivateUse1; }

// True when `t` is its storage's whole contents, densely: transfers can then skip any program.
bool spans_storage(const at::Tensor& t) {
  return t.is_contiguous() && t.storage_offset() == 0 &&
         t.numel() * t.element_size() == static_cast<int64_t>(t.storage().nbytes());
}

// PyTorch's lazy conjugate / negative bits: the logical value is conj(stored) / -stored.
hlo::Value apply_bits(hlo::Builder& b, hlo::Value v, bool conj, bool neg) {
  if (conj && is_complex(v.type.dtype)) {
    hlo::Value re = b.unary(hlo::UnaryOp::kReal, v), im = b.unary(hlo::UnaryOp::kImag, v);
    v = b.binary(hlo::BinaryOp::kComplex, re, -im);
  }
  return neg ? -v : v;
}

// Writes `src` (a tpu tensor broadcastable to dst) into the tpu view `dst`, converting dtype and
// resolving conjugate/negative bits on both sides.
// Padded where sizes vary (aten/varying_sizes.h), as an element-wise op is.
void copy_on_device(const at::Tensor& src, const at::Tensor& dst) {
  DType to = to_dtype(dst.scalar_type());
  bool src_conj = src.is_conj(), src_neg = src.is_neg(), dst_conj = dst.is_conj(), dst_neg = dst.is_neg();
  std::string key = std::string("copy|") + (src_conj ? "c" : "") + (src_neg ? "n" : "") + "|" +
                    (dst_conj ? "c" : "") + (dst_neg ? "n" : "");
  std::vector<exec::Operand> inputs{operand(src)}, outputs{operand(dst)};
  auto origin = origin_of("aten::copy_");
  std::vector<int64_t> varying = pad_elementwise(inputs, outputs);
  std::vector<int64_t> sizes = outputs[0].padding ? outputs[0].padding->box : dst.sizes().vec();
  exec::BufferRef& written = *outputs[0].storage;
  bool padded = outputs[0].padding.has_value();
  run_on_device({key,
                 [=](hlo::Builder& b, const std::vector<hlo::Value>& in) {
                   hlo::Value v = cast(b, apply_bits(b, widened(b, in[0]), src_conj, src_neg), computed_as(to));
                   return std::vector<hlo::Value>{cast(b, broadcast_to(b, apply_bits(b, v, dst_conj, dst_neg), sizes), to)};
                 },
                 std::move(inputs), std::move(outputs), origin});
  if (padded) written.set_varying_sizes(std::move(varying));
}

bool has_bits(const at::Tensor& t) { return t.is_conj() || t.is_neg(); }

// A contiguous tpu tensor on `device` holding the host tensor `cpu` (already in the wanted dtype).
// Where the sizes of integer tensors copied from one line vary (token ids, attention masks,
// labels), a contiguous host tensor is copied into `storage` padded on the host to a bucket's
// capacity, so that the ops reading it run padded too. The last dimension of an integer matrix
// (the sequence of token ids and masks [batch, length]) is padded from the first copy: the first
// prompt's programs then serve the next prompt's length. Returns false, copying nothing, where
// nothing is padded. Floating-point copies are left exact: `model.to("tpu")` copies every
// parameter from one line, and parameters stored padded would make every op that reads them slower.
// The contiguous host tensor `host` copied into `storage` with the capacity of its box, marked as
// varying in the sizes `varying` (sorted, none below 2), as a tensor an op wrote padded is.
void upload_boxed(const at::Tensor& host, exec::BufferRef& storage, const std::vector<int64_t>& varying) {
  std::vector<int64_t> sizes = host.sizes().vec();
  int64_t capacity = 1;
  for (int64_t n : box_of(sizes, varying)) capacity *= n;
  exec::upload_padded(storage, host.data_ptr(), to_dtype(host.scalar_type()), capacity);
  storage.set_varying_sizes(marks(sizes, varying));
}

bool upload_padded_if_varying(const at::Tensor& host, exec::BufferRef& storage) {
  if (!padding_enabled() || host.dim() == 0 || !c10::isIntegralType(host.scalar_type(), /*includeBool=*/true))
    return false;
  std::vector<int64_t> sizes = host.sizes().vec();
  std::vector<int64_t> varying = varying_sizes(origin_of("aten::copy_").get(), {}, {sizes});
  if (sizes.size() >= 2 && sizes.back() > 1 && bucket(sizes.back()) != sizes.back() &&
      std::find(varying.begin(), varying.end(), sizes.back()) == varying.end()) {
    varying.push_back(sizes.back());
    std::sort(varying.begin(), varying.end());
  }
  if (varying.empty()) return false;
  upload_boxed(host, storage, varying);
  return true;
}

at::Tensor upload_contiguous(const at::Tensor& cpu, c10::Device device) {
  at::Tensor host = cpu.contiguous();
  at::Tensor out = at::empty(host.sizes(), host.options().device(device));
  if (host.numel() > 0 && !upload_padded_if_varying(host, buffer_ref(out)))
    exec::upload(buffer_ref(out), host.data_ptr(), to_dtype(host.scalar_type()));
  return out;
}

// The tpu tensor `src` as a new contiguous host tensor of the same dtype. `kind` says why the
// host reads it ("item", "cpu"), refined from the Python stack for the metrics.
// A part of a storage up to this size is read by downloading the whole storage and picking the
// part on the host: a copy program on the device would be compiled per size and offset of the part
// (`x[i].item()` in a loop, the first n rows of a fixed buffer), and moving a few more bytes costs
// far less than one compile.
constexpr int64_t kWholeStorageDownloadBytes = 1 << 20;

bool download_whole_storage(const at::Tensor& src) {
  int64_t storage_bytes = static_cast<int64_t>(src.storage().nbytes());
  return !has_bits(src) && (storage_bytes <= kWholeStorageDownloadBytes ||
                            storage_bytes <= 2 * src.numel() * src.element_size());
}

at::Tensor download_contiguous(const at::Tensor& src, const char* kind = "cpu") {
  TracedLine line(kind);  // a profiler's copy event names the user's line
  at::Tensor host = at::empty(src.sizes(), src.options().device(c10::kCPU));
  if (host.numel() == 0) return host;
  std::string reason = sync_reason(kind);
  warn_or_error_on_sync(reason);
  if (spans_storage(src) && !has_bits(src)) {
    download_to_host(buffer_ref(src), host.data_ptr(), reason);
  } else if (download_whole_storage(src)) {
    int64_t element_size = src.element_size();
    at::Tensor whole = at::empty({static_cast<int64_t>(src.storage().nbytes()) / element_size},
                                 src.options().device(c10::kCPU));
    download_to_host(buffer_ref(src), whole.data_ptr(), reason);
    host.copy_(whole.as_strided(src.sizes(), src.strides(), src.storage_offset()));
  } else {
    at::Tensor dense = at::empty(src.sizes(), src.options());
    copy_on_device(src, dense);
    download_to_host(buffer_ref(dense), host.data_ptr(), reason);
  }
  return host;
}

at::Tensor copy_between(const at::Tensor& self, const at::Tensor& dst, bool non_blocking);

at::Tensor copy_from(const at::Tensor& self, const at::Tensor& dst, bool non_blocking) {
  try {
    return copy_between(self, dst, non_blocking);
  } catch (const exec::OutOfDeviceMemory& e) {
    TORCH_CHECK_WITH(OutOfMemoryError, false, e.what());
  }
}

// Host data into the whole storage of `dst`. A non_blocking copy from pinned memory returns before
// the device has read it, as CUDA's does; the pinned block stays allocated until then.
void upload_whole(const at::Tensor& host, const at::Tensor& dst, bool non_blocking) {
  DType dtype = to_dtype(host.scalar_type());
  if (upload_padded_if_varying(host, buffer_ref(dst))) return;  // copied on the host already
  if (non_blocking && is_pinned_host_address(host.data_ptr()))
    exec::upload_async(buffer_ref(dst), host.data_ptr(), dtype, hold_pinned_block(host.data_ptr()));
  else
    exec::upload(buffer_ref(dst), host.data_ptr(), dtype);
}

at::Tensor copy_between(const at::Tensor& self, const at::Tensor& dst, bool non_blocking) {
  TracedLine line("aten::copy_");  // a profiler's copy events name the user's line
  if (is_tpu(self) && is_tpu(dst)) {
    if (self.device() == dst.device()) {
      at::assert_no_internal_overlap(dst);  // as CPU's copy_: the result would depend on write order
      at::assert_no_partial_overlap(dst, self);
      copy_on_device(self, dst);
    } else {  // between two tpu devices: through the host for now
      copy_on_device(upload_contiguous(download_contiguous(self), dst.device()), dst);
    }
  } else if (is_tpu(self)) {  // tpu -> cpu
    dst.copy_(download_contiguous(self));
  } else {  // cpu -> tpu
    at::Tensor host = self.resolve_conj().resolve_neg().to(dst.scalar_type()).expand(dst.sizes()).contiguous();
    if (spans_storage(dst) && !has_bits(dst) && dst.numel() > 0)
      upload_whole(host, dst, non_blocking);
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
  return download_contiguous(self, "item").item();
}

// Module.to("tpu") / .cpu() keep a parameter's identity, and so weight ties, only when
// _has_compatible_shallow_copy_type(old, new) holds: `param.data = new` then swaps the storage in
// place. PyTorch's answer lists CPU, CUDA and other dense backends but not PrivateUse1; a tpu
// tensor is a plain dense TensorImpl, as shallow-copyable as a CUDA one.
bool is_dense(const at::Tensor& t) {
  using c10::DeviceType;
  DeviceType d = t.device().type();
  bool dense_device = d == DeviceType::CPU || d == DeviceType::CUDA || d == DeviceType::HIP ||
                      d == DeviceType::XPU || d == DeviceType::MPS || d == DeviceType::PrivateUse1;
  return dense_device && t.layout() == c10::kStrided && !t.is_quantized() && !t.is_nested();
}

bool has_compatible_shallow_copy_type(const at::Tensor& self, const at::Tensor& from) {
  return self.unsafeGetTensorImpl()->has_compatible_shallow_copy_type(from.key_set()) ||
         (is_dense(self) && is_dense(from));
}

// _copy_from resolves the conjugate/negative bits itself (above); without these fallthroughs
// PyTorch's Conjugate fallback would clone the input, which copies, which recurses.
TORCH_LIBRARY_IMPL(aten, Conjugate, m) {
  m.impl("_copy_from", torch::CppFunction::makeFallthrough());
  m.impl("_copy_from_and_resize", torch::CppFunction::makeFallthrough());
}
TORCH_LIBRARY_IMPL(aten, Negative, m) {
  m.impl("_copy_from", torch::CppFunction::makeFallthrough());
  m.impl("_copy_from_and_resize", torch::CppFunction::makeFallthrough());
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_copy_from", copy_from);
  m.impl("_copy_from_and_resize", copy_from_and_resize);
  m.impl("_local_scalar_dense", local_scalar_dense);
  m.impl("_has_compatible_shallow_copy_type", has_compatible_shallow_copy_type);
}
// The op is CompositeImplicitAutograd: tensors with autograd keys dispatch here.
TORCH_LIBRARY_IMPL(aten, AutogradPrivateUse1, m) {
  m.impl("_has_compatible_shallow_copy_type", has_compatible_shallow_copy_type);
}

}  // namespace

at::Tensor to_tpu_padded(const at::Tensor& host, std::vector<int64_t> varying) {
  TORCH_CHECK(host.device().is_cpu(), "to_tpu_padded copies a CPU tensor, not one on ", host.device());
  at::Tensor contiguous = host.contiguous();
  c10::Device device(c10::DeviceType::PrivateUse1, current_device());
  varying.erase(std::remove_if(varying.begin(), varying.end(), [](int64_t n) { return n <= 1; }), varying.end());
  std::sort(varying.begin(), varying.end());
  varying.erase(std::unique(varying.begin(), varying.end()), varying.end());
  if (contiguous.numel() == 0 || varying.empty()) return upload_contiguous(contiguous, device);
  at::Tensor out = at::empty(contiguous.sizes(), contiguous.options().device(device));
  upload_boxed(contiguous, buffer_ref(out), varying);
  return out;
}

}  // namespace torchtpu::aten
