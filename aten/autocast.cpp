// torch.autocast("tpu"): PyTorch's CUDA policy on the AutocastPrivateUse1 key, for float16 and
// bfloat16 (torch.get_autocast_dtype("tpu") picks which). Matmuls and convolutions run in the
// lower precision, precision-sensitive ops (softmax, norms, losses, pow, exp...) in float32, ops
// mixing inputs (addcmul, cat-like ops) in the widest input type; every other op falls through.
#include <ATen/autocast_mode.h>
#include <torch/library.h>
#include <torch/version.h>

namespace torchtpu::aten {
namespace {

// As on CUDA: binary_cross_entropy takes probabilities whose float16 rounding is unsafe.
at::Tensor binary_cross_entropy_refused(const at::Tensor&, const at::Tensor&,
                                        const std::optional<at::Tensor>&, int64_t) {
  TORCH_CHECK(false,
              "torch.nn.functional.binary_cross_entropy and torch.nn.BCELoss are unsafe to autocast "
              "on tpu (as on cuda). Use torch.nn.functional.binary_cross_entropy_with_logits or "
              "torch.nn.BCEWithLogitsLoss, which are safe, or run the loss outside the autocast region.");
}

}  // namespace

// The policy lists spell their signatures with unqualified ATen names.
#if TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR < 14
using at::DimnameList;  // named tensors (and this name) were removed in PyTorch 2.14
#endif
using at::IntArrayRef;
using at::Scalar;
using at::ScalarType;
using at::Tensor;

TORCH_LIBRARY_IMPL(_, AutocastPrivateUse1, m) { m.fallback(torch::CppFunction::makeFallthrough()); }

TORCH_LIBRARY_IMPL(aten, AutocastPrivateUse1, m) {
#define TORCHTPU_LOWER_PRECISION(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, lower_precision_fp)
#define TORCHTPU_FP32(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32)
#define TORCHTPU_FP32_SET_OPT_DTYPE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32_set_opt_dtype)
#define TORCHTPU_PROMOTE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, promote)
  AT_FORALL_LOWER_PRECISION_FP(TORCHTPU_LOWER_PRECISION)
  AT_FORALL_FP32(TORCHTPU_FP32)
  AT_FORALL_FP32_SET_OPT_DTYPE(TORCHTPU_FP32_SET_OPT_DTYPE)
  AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE(KERNEL_DIFFERENT_REDISPATCH_SIGNATURE_PRIVATEUSEONE)
  AT_FORALL_PROMOTE(TORCHTPU_PROMOTE)
#undef TORCHTPU_LOWER_PRECISION
#undef TORCHTPU_FP32
#undef TORCHTPU_FP32_SET_OPT_DTYPE
#undef TORCHTPU_PROMOTE
  m.impl(TORCH_SELECTIVE_NAME("aten::binary_cross_entropy"), TORCH_FN(binary_cross_entropy_refused));
}

}  // namespace torchtpu::aten
