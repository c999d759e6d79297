// Reading and writing strided views of a flat storage buffer inside a program.
//
// Views never copy on their own: the consuming op's program reads the elements it needs
// (slice + reshape when contiguous, a gather otherwise), and a write through a view becomes an
// update of the whole flat buffer (dynamic_update_slice when contiguous, a scatter otherwise).
#pragma once

#include "exec/view.h"
#include "hlo/builder.h"

namespace torchtpu::exec {

// The view's elements as a tensor of view.sizes and view.dtype, from `flat` (1-D).
hlo::Value read_view(hlo::Builder& b, const hlo::Value& flat, const View& view);

// `flat` with the view's elements replaced by `value` (shape view.sizes).
hlo::Value write_view(hlo::Builder& b, const hlo::Value& flat, const View& view,
                      const hlo::Value& value);

}  // namespace torchtpu::exec
