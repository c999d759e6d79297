// Views whose geometry arrives at run time: one program for every size a box holds.
//
// A padded operand (exec/op_call.h, Padding) reaches its program as a box of bucket sizes: the
// program reads the view's exact sizes, strides and offset from an s64 input instead of baking
// them in, gathers the view's elements into the box (padded positions read as the op's fill) and
// writes a result box back through the exact geometry of its destination, so that only the
// logical elements are ever stored. A storage written whole this way keeps a flat buffer of the
// box's size (its capacity): its logical elements first, zeros after them.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "exec/op_call.h"
#include "hlo/builder.h"

namespace torchtpu::exec {

// Numbers the geometry of the padded operands (Padding::at) and the offsets that arrive at run
// time (Operand::offset_at, exec/runtime_offset.h), uploads it and appends it to the call's inputs
// (OpCall::geometry). Returns whether an operand is padded.
bool attach_geometry(OpCall& call);

// The view's elements in its padding's box, padded positions reading as the fill; `flat` (1-D)
// holds elements of the view's dtype and `geometry` is the call's geometry input.
hlo::Value read_padded(hlo::Builder& b, const hlo::Value& flat, const hlo::Value& geometry, const View& view,
                       const Padding& padding);

// `flat` with the view's elements taken from `box` (its padding's box): a scatter. Without
// `flat` (the view covers its whole storage), a new flat value of `length` elements.
hlo::Value write_padded(hlo::Builder& b, const std::optional<hlo::Value>& flat, int64_t length,
                        const hlo::Value& geometry, const View& view, const Padding& padding, const hlo::Value& box);

// A padded operand's exact sizes, as an s64[rank] value.
hlo::Value padded_sizes(hlo::Builder& b, const hlo::Value& geometry, const View& view, const Padding& padding);

// For an op whose results are rows independent of one another (its dimensions before `row_dims`;
// every one for an element-wise op), each computed from the same row of the inputs `reads_rows`
// marks (all where empty) and from inputs that hold no rows (a weight): lets its padded operands
// hold their elements in storage order (Padding::in_storage_order) where that gives every row of a
// result the operands' rows of its own position. That holds where the padded dimensions lie in the
// rows, every padded operand is a contiguous view from offset 0 of the same sizes and box in the
// rows and unpadded after them, every result covers its whole storage, and the unpadded inputs
// that read rows broadcast along them (a bias, a scalar). Returns whether it did.
bool share_storage_order(std::vector<Operand>& inputs, std::vector<Operand>& outputs, int64_t row_dims,
                         const std::vector<bool>& reads_rows = {});

// Appends the padded operand's part of a cache key (its box and fill, not its exact geometry).
void append_padded_key(std::string& key, const View& view, const Padding& padding);

}  // namespace torchtpu::exec
