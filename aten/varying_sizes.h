// Which sizes of an op call vary from call to call, so that ops with a padding rule run padded
// (bounded dynamism: docs/design.md, "Shapes that change").
#pragma once

#include <cstdint>
#include <vector>

#include "exec/op_call.h"
#include "graph/node.h"

namespace torchtpu::aten {

// Whether ops with a padding rule run padded: TORCHTPU_BUCKETS=off turns it off.
bool padding_enabled();

// The size a varying size `n` is padded to: the next power of two, at least 8 (TORCHTPU_BUCKETS
// as a comma-separated list: the smallest listed size that fits, else `n`). 0 and 1 stay.
int64_t bucket(int64_t n);

// The sizes that vary in a call: those the padded input storages vary in (marked by the op that
// wrote them), and, at a user's line (`origin`), those that differ from the first call made there
// (the line's tensors have the same number of dimensions). Sorted; never 0 or 1.
std::vector<int64_t> varying_sizes(const graph::Origin* origin, const std::vector<exec::Operand>& inputs,
                                   const std::vector<std::vector<int64_t>>& output_sizes);

// `sizes` with each varying size padded to its bucket.
std::vector<int64_t> box_of(const std::vector<int64_t>& sizes, const std::vector<int64_t>& varying);

// Pads the operands of an element-wise call made outside the lowering registry (a copy between
// tpu tensors) where its sizes vary or its storages are padded; false, changing nothing, where it
// runs at exact sizes. Returns the sizes that vary (empty: none), to mark the results with.
std::vector<int64_t> pad_elementwise(const graph::Origin* origin, std::vector<exec::Operand>& inputs,
                     std::vector<exec::Operand>& outputs);

}  // namespace torchtpu::aten
