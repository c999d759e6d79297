// Allocation and filling: empty, empty_strided, fill_, zero_, and the Kaiser window.
#include <ATen/EmptyTensor.h>
#include <ATen/OpMathType.h>
#include <ATen/TensorOperators.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/ones.h>
#include <ATen/ops/pow.h>
#include <ATen/ops/scalar_tensor.h>
#include <ATen/ops/special_i0.h>
#include <ATen/ops/sqrt.h>
#include <torch/csrc/autograd/function.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "aten/device.h"
#include "aten/dtype_support.h"
#include "aten/ops/lowering_util.h"
#include "aten/origin.h"
#include "aten/tensor_operand.h"
#include "aten/varying_sizes.h"
#include "exec/executor.h"

namespace torchtpu::aten {
namespace {

constexpr c10::DispatchKeySet kTpuKeys{c10::DispatchKey::PrivateUse1};

// The dtype a new tensor gets; one tpu tensors cannot hold (uint16, float8) raises here, not at
// the tensor's first use.
c10::ScalarType held_dtype(std::optional<c10::ScalarType> dtype) {
  c10::ScalarType t = dtype.value_or(c10::get_default_dtype_as_scalartype());
  to_dtype(t);
  return t;
}

at::Tensor empty(c10::IntArrayRef size, std::optional<c10::ScalarType> dtype,
                 std::optional<c10::Layout>, std::optional<c10::Device> device,
                 std::optional<bool>, std::optional<c10::MemoryFormat> memory_format) {
  c10::DeviceGuard guard(device.value_or(c10::Device(c10::DeviceType::PrivateUse1, current_device())));
  return at::detail::empty_generic(size, tpu_allocator(), kTpuKeys, held_dtype(dtype), memory_format);
}

at::Tensor empty_strided(c10::IntArrayRef size, c10::IntArrayRef stride,
                         std::optional<c10::ScalarType> dtype, std::optional<c10::Layout>,
                         std::optional<c10::Device> device, std::optional<bool>) {
  c10::DeviceGuard guard(device.value_or(c10::Device(c10::DeviceType::PrivateUse1, current_device())));
  return at::detail::empty_strided_generic(size, stride, tpu_allocator(), kTpuKeys, held_dtype(dtype));
}

// Whether `value` is stored as all-zero bytes in any dtype (not -0.0).
bool zero_bytes(const c10::Scalar& value) {
  if (value.isIntegral(/*includeBool=*/true)) return value.isBoolean() ? !value.toBool() : value.toLong() == 0;
  c10::complex<double> v = value.toComplexDouble();
  return v.real() == 0 && v.imag() == 0 && !std::signbit(v.real()) && !std::signbit(v.imag());
}

// The sizes a zero fill of `self` is stored padded in, or none. select's and slice's backward
// scatter the gradient into zeros of their input's sizes, made on the autograd engine's thread:
// where those sizes change between calls by one kind of node (a sequence length), the zeros are
// stored padded, as the forward's tensors were, so that the ops reading the gradient next (a
// layer norm's backward) run padded too instead of compiling once per new length.
std::vector<int64_t> varying_in_backward_zeros(const at::Tensor& self, const exec::Operand& out) {
  if (!padding_enabled() || self.dim() == 0 || out.storage->varies() || !self.is_contiguous() ||
      self.storage_offset() != 0 || self.numel() * self.element_size() != static_cast<int64_t>(self.storage().nbytes()))
    return {};
  c10::intrusive_ptr<torch::autograd::Node> node = torch::autograd::get_current_node();
  if (!node) return {};
  // Nodes of one kind at several places differ in their sizes too: only a size the forward's
  // padded tensors varied in counts (a static workload keeps its exact programs, and their bits).
  std::vector<int64_t> varying = varying_sizes(backward_origin("aten::fill_", node->name()).get(), {}, {self.sizes().vec()});
  varying.erase(std::remove_if(varying.begin(), varying.end(), [](int64_t n) { return !recently_varied(n); }),
                varying.end());
  return varying;
}

at::Tensor& fill_scalar(at::Tensor& self, const c10::Scalar& value) {
  exec::Operand out = operand(self);
  std::vector<int64_t> varying = zero_bytes(value) ? varying_in_backward_zeros(self, out) : std::vector<int64_t>{};
  if (!varying.empty())
    out.padding = padding_of(box_of(out.view.sizes, varying), out.view.sizes, [&](size_t d) {
      return std::binary_search(varying.begin(), varying.end(), out.view.sizes[d]);
    });
  hlo::TensorType type{computed_as(out.view.dtype), out.padding ? out.padding->box : out.view.sizes};
  exec::Lowering lower;
  std::string key;
  // CPU's overflow check: 200 does not fit int8; -9 fits uint8 by wrapping. Its one-element fill
  // (scalar_tensor, where's Scalar) of a 16-bit float checks nothing: 7e4 becomes inf.
  if (self.numel() != 1 || !at::isReducedFloatingType(self.scalar_type())) check_scalar_fits(value, self.scalar_type());
  if (value.isIntegral(/*includeBool=*/true)) {
    int64_t v = value.isBoolean() ? value.toBool() : value.toLong();
    key = "fill|i" + std::to_string(v);
    lower = [v, type](hlo::Builder& b, const std::vector<hlo::Value>&) {
      return std::vector<hlo::Value>{b.constant_int(v, type)};
    };
  } else if (value.isComplex() && is_complex(type.dtype)) {
    c10::complex<double> v = value.toComplexDouble();
    char exact[80];
    std::snprintf(exact, sizeof exact, "fill|c%a,%a", v.real(), v.imag());
    key = exact;
    lower = [v, type](hlo::Builder& b, const std::vector<hlo::Value>&) {
      hlo::TensorType part{component_dtype(type.dtype), type.dims};
      return std::vector<hlo::Value>{b.binary(hlo::BinaryOp::kComplex, b.constant(v.real(), part), b.constant(v.imag(), part))};
    };
  } else {
    double v = value.toDouble();  // a complex value with an imaginary part raises, as on CPU
    char exact[32];  // the key must tell apart every double, so no rounding here
    std::snprintf(exact, sizeof exact, "%a", v);
    key = std::string("fill|f") + exact;
    lower = [v, type](hlo::Builder& b, const std::vector<hlo::Value>&) {
      return std::vector<hlo::Value>{b.constant(v, type)};
    };
  }
  if (type.dtype != out.view.dtype)
    lower = [lower, stored = out.view.dtype](hlo::Builder& b, const std::vector<hlo::Value>& in) {
      return std::vector<hlo::Value>{b.convert(lower(b, in).at(0), stored)};
    };
  exec::BufferRef& written = *out.storage;
  exec::OpCall call{key, lower, {}, {out}, origin_of("aten::fill_")};
  call.zero_bytes = zero_bytes(value);
  run_on_device(std::move(call));
  if (!varying.empty()) written.set_varying_sizes(marks(self.sizes().vec(), varying));
  return self;
}

at::Tensor& zero(at::Tensor& self) { return fill_scalar(self, 0); }

// Autograd makes "efficient" zero tensors (a dispatch key, no storage) for gradients known to be
// zero (sgn's backward of a real tensor). A tpu one is an ordinary tensor of zeros: the key only saves
// memory, and every tpu kernel would otherwise need a storage-less case.
at::Tensor efficient_zero_tensor(c10::IntArrayRef size, std::optional<c10::ScalarType> dtype,
                                 std::optional<c10::Layout> layout, std::optional<c10::Device> device,
                                 std::optional<bool> pin_memory) {
  at::Tensor zeros = empty(size, dtype, layout, device, pin_memory, std::nullopt);
  return zero(zeros);
}

// torch.kaiser_window computes its values in a CPU/CUDA kernel (kaiser_window_stub) a tpu device
// has none of; here CPU's formula from lowered ops: I0(beta * sqrt(1 - ((n - a) / a)^2)) / I0(beta)
// with a = (N - 1) / 2, over the window's positions counted in its dtype, computed in float32
// for 16-bit floats.
at::Tensor kaiser_window(int64_t length, bool periodic, double beta, std::optional<c10::ScalarType> dtype,
                         std::optional<c10::Layout> layout, std::optional<c10::Device> device,
                         std::optional<bool> pin_memory) {
  at::TensorOptions options = at::TensorOptions().dtype(held_dtype(dtype)).layout(layout).device(device)
                                  .pinned_memory(pin_memory);
  TORCH_CHECK(length >= 0, "kaiser_window requires non-negative window_length, got window_length=", length);
  TORCH_CHECK(at::isFloatingType(options.dtype().toScalarType()), "kaiser_window expects floating point dtypes, got: ",
              options);
  if (length <= 1) return at::ones({length}, options);
  int64_t n = periodic ? length + 1 : length;
  c10::ScalarType math = at::toOpMathType(options.dtype().toScalarType());
  at::Tensor position = at::arange(n, options).to(math);
  double half = (n - 1) / 2.0;
  at::Tensor window = at::special_i0(beta * at::sqrt(1 - at::pow((position - half) / half, 2))) /
                      at::special_i0(at::scalar_tensor(beta, position.options()));
  return window.narrow(0, 0, length).to(options.dtype().toScalarType());
}
at::Tensor kaiser_window_default(int64_t length, std::optional<c10::ScalarType> dtype,
                                 std::optional<c10::Layout> layout, std::optional<c10::Device> device,
                                 std::optional<bool> pin_memory) {
  return kaiser_window(length, true, 12.0, dtype, layout, device, pin_memory);
}
at::Tensor kaiser_window_periodic(int64_t length, bool periodic, std::optional<c10::ScalarType> dtype,
                                  std::optional<c10::Layout> layout, std::optional<c10::Device> device,
                                  std::optional<bool> pin_memory) {
  return kaiser_window(length, periodic, 12.0, dtype, layout, device, pin_memory);
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_efficientzerotensor", efficient_zero_tensor);
  m.impl("kaiser_window", kaiser_window_default);
  m.impl("kaiser_window.periodic", kaiser_window_periodic);
  m.impl("kaiser_window.beta", kaiser_window);
  m.impl("empty.memory_format", empty);
  m.impl("empty_strided", empty_strided);
  m.impl("fill_.Scalar", fill_scalar);
  m.impl("zero_", zero);
}

}  // namespace
}  // namespace torchtpu::aten
