#include "aten/prepared_args.h"

#include <ATen/ops/nonzero.h>

#include <optional>

#include "aten/boxed_call.h"

namespace torchtpu::aten {
namespace {

bool is_mask(const at::Tensor& t) {
  return t.defined() && (t.scalar_type() == c10::kBool || t.scalar_type() == c10::kByte);
}

// CPU's check of a mask against the dimensions of `self` it indexes, from `dim` on: the same
// sizes (one of size 1 does not broadcast).
void check_mask(const at::Tensor& self, int64_t dim, const at::Tensor& mask) {
  for (int64_t j = 0; j < mask.dim() && dim + j < self.dim(); ++j)
    TORCH_CHECK_INDEX(mask.size(j) == self.size(dim + j), "The shape of the mask ", mask.sizes(), " at index ", j,
                      " does not match the shape of the indexed tensor ", self.sizes(), " at index ", dim + j);
}

// Index lists as CPU's and CUDA's indexing kernels prepare theirs: index tensors on the CPU
// (x[cpu_indices] and x[cpu_mask] = v on a tpu x, as on a CUDA one) move to the device, and boolean
// masks become the long indices of their true positions (computed on the device, as CUDA does);
// then the op runs again. Returns false when there was nothing to prepare.
bool prepare_index_lists(const OpPlan& plan, const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  if (!plan.has_index_list) return false;
  size_t n = plan.args.size();
  for (size_t i = 0; i < n; ++i) {
    if (plan.args[i].kind != ArgKind::kIndexList) continue;
    c10::IValue& arg = (*stack)[stack->size() - n + i];
    bool prepare = false;
    for_each_tensor(arg, [&](const at::Tensor& t) { prepare |= is_mask(t) || (t.defined() && !on_tpu(t)); });
    if (!prepare) continue;
    int self_device = device_of(std::vector<c10::IValue>(stack->end() - n, stack->end()));
    c10::Device device(c10::DeviceType::PrivateUse1, static_cast<c10::DeviceIndex>(self_device));
    c10::List<std::optional<at::Tensor>> prepared;
    const c10::IValue& self = (*stack)[stack->size() - n];
    int64_t dim = 0;  // the first of self's dimensions the next index indexes
    for (const c10::IValue& e : arg.toListRef()) {
      if (!e.isTensor() || !e.toTensor().defined()) {
        prepared.push_back(std::nullopt);
        ++dim;
        continue;
      }
      at::Tensor index = e.toTensor().to(device);
      if (!is_mask(index)) {
        prepared.push_back(index);
        ++dim;
        continue;
      }
      if (self.isTensor()) check_mask(self.toTensor(), dim, index);
      dim += index.dim();
      at::Tensor positions = at::nonzero(index);
      for (int64_t d = 0; d < positions.size(1); ++d) prepared.push_back(positions.select(1, d));
    }
    arg = prepared;
    op.callBoxed(stack);
    return true;
  }
  return false;
}

// Inputs with a conjugate or negative bit are materialized first (conj_physical, on the device),
// then the op runs again. Returns false when there was none.
bool resolve_conjugate_bits(const OpPlan& plan, const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  if (!plan.sees_conjugate_bits) return false;
  size_t n = plan.args.size();
  bool any = false;
  for (size_t i = 0; i < n; ++i) {
    c10::IValue& arg = (*stack)[stack->size() - n + i];
    if (plan.args[i].written || !arg.isTensor()) continue;
    const at::Tensor& t = arg.toTensor();
    if (t.defined() && (t.is_conj() || t.is_neg())) {
      arg = t.resolve_conj().resolve_neg();
      any = true;
    }
  }
  if (any) op.callBoxed(stack);
  return any;
}

}  // namespace

bool rerun_with_prepared_args(const OpPlan& plan, const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  return prepare_index_lists(plan, op, stack) || resolve_conjugate_bits(plan, op, stack);
}

}  // namespace torchtpu::aten
