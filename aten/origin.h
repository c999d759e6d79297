// Where an op came from: the ATen op and the innermost Python frame outside torch and torchtpu
// (the user's line), kept with each op record so a failure surfacing later can name it.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "exec/trace.h"
#include "graph/node.h"

namespace torchtpu::aten {

std::shared_ptr<const graph::Origin> origin_of(const std::string& op);

// The origin of `op` run by an autograd node of kind `node` ("SelectBackward0") on the engine's
// thread, which has no user frame: one per (op, node kind), so that sizes changing between calls
// there can start padding (aten/varying_sizes.h).
std::shared_ptr<const graph::Origin> backward_origin(const std::string& op, const std::string& node);

// Why the host is waiting for device data, from the Python stack: "print" (tensor printing),
// "control flow" (a tensor used as a condition), else `kind` ("item", "cpu").
std::string sync_reason(const char* kind);

// While a profiler records, makes the user's line the cause of what this thread does until the
// scope ends (copies, host reads, compiled graphs: see exec::TraceCause). Otherwise it does
// nothing, since finding the line walks the Python stack.
class TracedLine {
 public:
  explicit TracedLine(const std::string& op);

 private:
  std::shared_ptr<const graph::Origin> origin_;
  std::optional<exec::TraceCause> cause_;
};

}  // namespace torchtpu::aten
