// What one call of a lowered op carries through its kernel (aten/boxed_kernel.cpp) and, where
// its sizes vary, through padding (aten/padded_call.cpp).
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/stack.h>

#include <memory>
#include <string>
#include <vector>

#include "aten/op_plan.h"
#include "exec/op_call.h"

namespace torchtpu::aten {

inline bool on_tpu(const at::Tensor& t) { return t.device().type() == c10::DeviceType::PrivateUse1; }

// The tpu device a call runs on: its first tpu tensor's, else a tpu device argument's, else the
// current one.
int device_of(const std::vector<c10::IValue>& args);

// Applies `f` to every tensor inside an IValue (a Tensor, Tensor[] or Tensor?[]).
template <typename F>
void for_each_tensor(const c10::IValue& v, F&& f) {
  if (v.isTensor()) {
    f(v.toTensor());
  } else if (v.isTensorList()) {
    for (const at::Tensor& t : v.toTensorList().vec()) f(t);
  } else if (v.isList()) {
    for (const c10::IValue& e : v.toListRef())
      if (e.isTensor()) f(e.toTensor());
  }
}

// v with f applied to each of its tensors (a Tensor, Tensor[] or Tensor?[]).
template <typename F>
c10::IValue map_tensors(const ArgPlan& arg, const c10::IValue& v, F&& f) {
  if (v.isTensor()) return f(v.toTensor());
  if (v.isTensorList()) {
    c10::List<at::Tensor> out;
    for (const at::Tensor& t : v.toTensorList().vec()) out.push_back(f(t));
    return out;
  }
  if (arg.tensor_list() && v.isList()) {
    c10::List<std::optional<at::Tensor>> out;
    for (const c10::IValue& e : v.toListRef())
      out.push_back(e.isTensor() ? std::optional<at::Tensor>(f(e.toTensor())) : std::nullopt);
    return out;
  }
  return v;
}

// Everything the program needs from one call's arguments.
struct Inputs {
  std::vector<exec::Operand> operands;
  std::vector<size_t> count;  // operands contributed by each argument
  std::vector<std::shared_ptr<exec::BufferRef>> scalars;  // keeps scalar storages alive
  std::string key;
  std::vector<std::vector<int64_t>> varying;  // the sizes each padded result varies in
  std::vector<std::vector<int64_t>> varying_strides;  // and the strides of its dimensions that do
};

struct LoweringCall;

// What the meta kernel said: the meta arguments after the call (out= ones resized) and returns.
// With them, the first call that has them leaves its lowering (see LoweringCall) for the next.
struct MetaResult {
  std::vector<c10::IValue> args;
  torch::jit::Stack returns;
  mutable std::shared_ptr<const LoweringCall> lowering;  // std::atomic_load/store: any thread
};

// A description of everything output metadata depends on: each tensor's dtype, sizes and
// strides, each Scalar's (and Scalar list element's) kind, their values too for shape_from_scalars
// ops and static scalars, every other argument's value. The op's lowering (LoweringCall) is shared
// by the calls with one key, so the key also tells apart whatever a lowering reads.
std::string meta_key(const OpPlan& plan, const std::vector<c10::IValue>& args);

}  // namespace torchtpu::aten
