// Views whose offset arrives at run time: one program for a view at any offset of its storage.
//
// A view's offset is part of the program that reads or writes it, so an op issued at one line on a
// view that moves between calls (`x[i]` in a loop, row i of a fixed buffer, a seeded row of a
// sampler) compiled a program per offset. The second offset seen for an operand of an op at a line
// makes that operand's offset a run-time value from then on, as Dynamo's automatic dynamic shapes
// do for sizes: the program takes the view's extent out of the flat storage at that offset
// (dynamic_slice), reads or writes the view inside it with its own sizes and strides, and puts the
// extent back (dynamic_update_slice). Views that stay where they are keep their programs.
#pragma once

#include <cstddef>

#include "exec/op_call.h"
#include "hlo/builder.h"

namespace torchtpu::exec {

// Whether the operand `k` of `call` (its inputs, then its outputs) reads its offset at run time;
// records the offset seen. Only unpadded operands of calls with an origin qualify. Beside padded
// operands (`beside_padding`) every one that qualifies does, from the first call: the program has
// a geometry input anyway, and calls at other lines on other parts of one storage (a key and a
// value sliced from one projection, cat into two caches) then share one program.
bool offset_varies(const OpCall& call, size_t k, const Operand& o, bool beside_padding);

// The view's elements from the 1-D `flat` of the view's dtype, the view starting at `offset`
// (a 0-d s64 value) instead of view.offset.
hlo::Value read_at_offset(hlo::Builder& b, const hlo::Value& flat, const hlo::Value& offset, const View& view);

// `flat` with the view's elements, the view starting at `offset`, replaced by `value`.
hlo::Value write_at_offset(hlo::Builder& b, const hlo::Value& flat, const hlo::Value& offset, const View& view,
                           const hlo::Value& value);

}  // namespace torchtpu::exec
