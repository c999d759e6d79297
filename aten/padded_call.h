// Bounded dynamism in a lowered op's call (docs/design.md, "Shapes that change"): an op with a
// padding rule whose sizes vary runs on boxes of bucket sizes, its exact sizes read at run time.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>

#include <memory>
#include <utility>
#include <vector>

#include "aten/boxed_call.h"
#include "graph/node.h"

namespace torchtpu::aten {

// Gives the operands of a call whose sizes vary their padding, and `in.varying` what each padded
// result varies in; returns the metadata of the boxes, or null, changing nothing, where the call
// runs at its exact sizes.
std::shared_ptr<const MetaResult> pad_operands(const c10::OperatorHandle& op, const OpPlan& plan,
                                               const std::vector<c10::IValue>& args, const graph::Origin* origin,
                                               Inputs& in, std::vector<exec::Operand>& outputs);

// The storages of the padded results, with the sizes each varies in and their strides
// (pad_operands' lists, moved out of `in`): what to mark each storage with once it is written.
struct VaryingResult {
  exec::BufferRef* storage;
  std::vector<int64_t> sizes, strides;
};
std::vector<VaryingResult> varying_results(const std::vector<exec::Operand>& outputs, Inputs& in);

}  // namespace torchtpu::aten
