// Arguments a lowered op cannot take as they come (index lists with masks or CPU tensors,
// tensors with a conjugate or negative bit), prepared as CPU's and CUDA's kernels prepare theirs.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

#include "aten/op_plan.h"

namespace torchtpu::aten {

// Prepares the call's arguments on `stack` where it needs to and runs the op again with them;
// returns false, changing nothing, where there was nothing to prepare.
bool rerun_with_prepared_args(const OpPlan& plan, const c10::OperatorHandle& op, torch::jit::Stack* stack);

}  // namespace torchtpu::aten
