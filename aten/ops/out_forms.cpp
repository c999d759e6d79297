// The out= forms of ops whose functional form tpu implements as a kernel of its own (data-
// dependent sizes, compositions), as a lowering registered under its functional name only, or
// PyTorch composes of other ops while the out= form has a CPU kernel only. The functional kernel
// runs, then each result is resized into and copied to its out argument, as PyTorch's generated
// out= wrappers do. Without these the out= forms ran on the CPU fallback.
#include <ATen/native/Resize.h>
#include <torch/library.h>

#include <unordered_map>

namespace torchtpu::aten {
namespace {

struct OutForm {
  const char* out;         // "nonzero.out"
  const char* functional;  // "nonzero" (an empty overload) or "repeat_interleave.Tensor"
};

// test_lowerings.py checks that no out= form of an op with a tpu kernel is missing from here.
constexpr OutForm kOutForms[] = {
    {"nonzero.out", "nonzero"},
    {"masked_select.out", "masked_select"},
    {"bincount.out", "bincount"},
    {"repeat_interleave.Tensor_out", "repeat_interleave.Tensor"},
    {"_unique.out", "_unique"},
    {"_unique2.out", "_unique2"},
    {"unique_dim.out", "unique_dim"},
    {"unique_consecutive.out", "unique_consecutive"},
    {"native_batch_norm.out", "native_batch_norm"},
    {"_batch_norm_with_update.out", "_batch_norm_with_update"},
    {"_embedding_bag.out", "_embedding_bag"},
    {"_adaptive_avg_pool3d_backward.out", "_adaptive_avg_pool3d_backward"},
    {"_masked_softmax.out", "_masked_softmax"},
    {"_native_multi_head_attention.out", "_native_multi_head_attention"},
    {"_transformer_encoder_layer_fwd.out", "_transformer_encoder_layer_fwd"},
    {"_standard_gamma_grad.out", "_standard_gamma_grad"},
    {"_thnn_fused_lstm_cell.out", "_thnn_fused_lstm_cell"},
    {"_thnn_fused_lstm_cell_backward_impl.out", "_thnn_fused_lstm_cell_backward_impl"},
    {"_thnn_fused_gru_cell.out", "_thnn_fused_gru_cell"},
    {"_thnn_fused_gru_cell_backward.out", "_thnn_fused_gru_cell_backward"},
    {"fake_quantize_per_tensor_affine_cachemask.out", "fake_quantize_per_tensor_affine_cachemask"},
    {"fake_quantize_per_channel_affine_cachemask.out", "fake_quantize_per_channel_affine_cachemask"},
    {"_fake_quantize_per_tensor_affine_cachemask_tensor_qparams.out",
     "_fake_quantize_per_tensor_affine_cachemask_tensor_qparams"},
    // Functional forms PyTorch composes of other ops, whose out= forms have CPU kernels only.
    {"adaptive_avg_pool2d.out", "adaptive_avg_pool2d"},
    {"adaptive_avg_pool3d.out", "adaptive_avg_pool3d"},
    {"linalg_eigvals.out", "linalg_eigvals"},
    {"mvlgamma.out", "mvlgamma"},
    {"narrow_copy.out", "narrow_copy"},
};

c10::OperatorHandle find_op(const std::string& name) {  // "nonzero", "repeat_interleave.Tensor"
  auto dot = name.find('.');
  std::string overload = dot == std::string::npos ? "" : name.substr(dot + 1);
  return c10::Dispatcher::singleton().findSchemaOrThrow(("aten::" + name.substr(0, dot)).c_str(), overload.c_str());
}

// The functional op of each out= form, looked up once (at the first call: every aten op is
// registered by then).
const c10::OperatorHandle& functional_of(const c10::OperatorHandle& out_op) {
  static const auto* by_out = [] {
    auto* map = new std::unordered_map<c10::OperatorName, c10::OperatorHandle>;
    for (const OutForm& form : kOutForms) map->emplace(find_op(form.out).operator_name(), find_op(form.functional));
    return map;
  }();
  return by_out->at(out_op.operator_name());
}

void run_through_functional(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const auto& arguments = op.schema().arguments();
  std::vector<c10::IValue> args(stack->end() - arguments.size(), stack->end());
  torch::jit::drop(*stack, arguments.size());
  std::vector<at::Tensor> outs;
  torch::jit::Stack call;
  for (size_t i = 0; i < arguments.size(); ++i) {
    if (arguments[i].is_out()) outs.push_back(args[i].toTensor());
    else call.push_back(std::move(args[i]));
  }
  functional_of(op).redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::PrivateUse1), &call);
  TORCH_INTERNAL_ASSERT(call.size() == outs.size());
  for (size_t i = 0; i < outs.size(); ++i) {
    const at::Tensor& result = call[i].toTensor();
    at::native::resize_output(outs[i], result.sizes());
    outs[i].copy_(result);
    stack->push_back(outs[i]);
  }
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  for (const OutForm& form : kOutForms)
    m.impl(form.out, torch::CppFunction::makeFromBoxedFunction<&run_through_functional>());
}

}  // namespace
}  // namespace torchtpu::aten
