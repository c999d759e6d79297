// Turns an OpCall over storages into a graph node over values: the op's record.
//
// The node reads the storages' current values and produces one new flat value per written
// storage, which is swapped into the storage at once; whether the node then executes right away
// (debug, strict) or joins the pending graph (fused, lazy) is the executor's choice.
#pragma once

#include <memory>
#include <optional>
#include <vector>

#include "exec/op_call.h"
#include "graph/node.h"
#include "runtime/executable.h"

namespace torchtpu::exec {

// Takes the lowering and the operands out of `call` (the node owns them); its key and origin stay.
graph::NodePtr record_op(OpCall&& call);

// Strict mode's shortcut: an op whose one-op program is loaded already runs without a graph node,
// a window or a kept lowering. Returns that program with its parameters and results (the new
// values, already in the written storages: the caller executes it), or nothing, with nothing
// changed, when the program is not loaded (record_op then takes the long way).
struct BoundOp {
  std::shared_ptr<runtime::Executable> exe;
  std::vector<graph::ValuePtr> parameters, results;
  int device;
};
std::optional<BoundOp> bind_loaded(const OpCall& call);

// The device-side checks `inputs` carry that have not passed, which values computed from them
// inherit. Computing from a value whose check failed throws CheckFailed here, at the user's op.
std::vector<graph::CheckPtr> unsettled_checks(const std::vector<graph::ValuePtr>& inputs);

}  // namespace torchtpu::exec
