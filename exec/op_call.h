// One operation as the executor sees it: a lowering plus the storages and views it reads/writes.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "exec/buffer_ref.h"
#include "exec/view.h"
#include "graph/node.h"
#include "hlo/builder.h"

namespace torchtpu::exec {

// Emits the op's results from its inputs. Each input arrives as a value of its view's shape and
// dtype; each result must have the shape and dtype of the corresponding output view. It may run
// later (fused and lazy modes) or on another thread, so it must own what it captures.
using Lowering =
    std::function<std::vector<hlo::Value>(hlo::Builder&, const std::vector<hlo::Value>& inputs)>;

struct Operand {
  BufferRef* storage;
  View view;
};

struct OpCall {
  // Names the lowering and every attribute that changes the program it emits ("add|alpha=2").
  // With the operands' geometry it forms the compile-cache key, so no program text is built on a
  // cache hit.
  std::string key;
  Lowering lower;
  std::vector<Operand> inputs;
  std::vector<Operand> outputs;
  std::shared_ptr<const graph::Origin> origin;  // for errors and metrics; may be null
  bool zero_bytes = false;  // it writes all-zero bytes (a zero fill): see graph::Node::zero_bytes
};

}  // namespace torchtpu::exec
