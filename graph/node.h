// One recorded operation: a program fragment from flat input buffers to flat output buffers.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "graph/device_value.h"
#include "hlo/builder.h"

namespace torchtpu::graph {

// Emits the node's flat outputs from its flat inputs (one value per input, in order).
using Emit = std::function<std::vector<hlo::Value>(hlo::Builder&, const std::vector<hlo::Value>& inputs)>;

// Where a recorded op came from, for errors and metrics: the ATen op and the user's source line.
struct Origin {
  std::string op;
  std::string location;  // "train.py:42", or empty when no Python frame issued the op
  std::string describe() const { return location.empty() ? op : op + " at " + location; }
};

struct Node {
  // Identifies the fragment's program (op, attributes, input and output geometry): the key of
  // its single-op executable, and its part of a window's structural key.
  std::string key;
  Emit emit;
  std::vector<ValuePtr> inputs;
  // Outputs are not owned: a value nobody holds or reads any more needs not be produced.
  std::vector<std::weak_ptr<DeviceValue>> outputs;
  std::shared_ptr<const Origin> origin;
  // Its one output replaces a whole storage with all-zero bytes (torch.zeros, an optimizer's
  // state): run alone, a compile miss uploads zeros and compiles the program in the background.
  bool zero_bytes = false;
};

using NodePtr = std::shared_ptr<Node>;

}  // namespace torchtpu::graph
