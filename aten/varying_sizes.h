// Which sizes of an op call vary from call to call, so that ops with a padding rule run padded
// (bounded dynamism: docs/design.md, "Shapes that change").
#pragma once

#include <optional>

#include <cstdint>
#include <functional>
#include <vector>

#include "exec/op_call.h"
#include "graph/node.h"

namespace torchtpu::aten {

// Whether ops with a padding rule run padded: TORCHTPU_BUCKETS=off turns it off.
bool padding_enabled();
// Turns padding on or off for the calling thread (torchtpu.padding(enabled)), or back to
// TORCHTPU_BUCKETS's setting with nullopt; returns the thread's previous setting.
std::optional<bool> set_thread_padding(std::optional<bool> enabled);

// The size a varying size `n` is padded to: the next power of two, at least 16 (TORCHTPU_BUCKETS
// as a comma-separated list: the smallest listed size that fits, else `n`). 0 and 1 stay.
int64_t bucket(int64_t n);

// The sizes that vary in a call: those the padded input storages vary in (marked by the op that
// wrote them), and, given the user's line (`origin`) of an op that seeds padding, those that have
// differed between calls there. Sorted; never 0 or 1.
std::vector<int64_t> varying_sizes(const graph::Origin* origin, const std::vector<exec::Operand>& inputs,
                                   const std::vector<std::vector<int64_t>>& output_sizes);

// What a padded result of `sizes` is marked with (BufferRef::varying_sizes) when `varying` vary:
// those sizes, and the product of every run of adjacent dimensions holding one, so that a view
// merging them ([B, L, D] seen as [B*L, D] by a matmul) varies too. Notes `varying` for
// recently_varied().
std::vector<int64_t> marks(const std::vector<int64_t>& sizes, const std::vector<int64_t>& varying);

// Whether `n` is among the varying sizes the most recent padded results were marked with (by
// marks()): what a backward pass's zeros may vary in (aten/ops/factories.cpp), so that a workload
// whose forward pads nothing never pads there.
bool recently_varied(int64_t n);

// Operands padding leaves at exact sizes: empty ones (nothing to gather from or into), and views
// of a storage holding another element type (a padded read gathers elements of its own type).
bool empty_operand(const exec::Operand& o);
bool holds_own_type(const exec::Operand& o);

// What a varying size `n` is padded to: a multiple k·d of the largest smaller varying size d >= 16 (the B·L rows
// of a [B, L, D] tensor seen as a matrix) gets k's box times d's bucket, the rows of the boxes it
// merges, so that the merged view and the split one pad alike; any other size its bucket.
int64_t box_size(int64_t n, const std::vector<int64_t>& varying);

// `sizes` with each varying size padded (box_size).
std::vector<int64_t> box_of(const std::vector<int64_t>& sizes, const std::vector<int64_t>& varying);

// The padding of a view of `sizes` in `box` whose dimensions `varies` says vary: with the one
// that does as Padding::rows.
exec::Padding padding_of(std::vector<int64_t> box, const std::vector<int64_t>& sizes,
                         const std::function<bool(size_t dim)>& varies, exec::Fill fill = exec::Fill::kZero);

// Pads the operands of an element-wise call made outside the lowering registry (a copy between
// tpu tensors) where its storages are padded; where it runs at exact sizes, it changes nothing.
// Returns what to mark the (first) result with: empty where nothing varies.
std::vector<int64_t> pad_elementwise(std::vector<exec::Operand>& inputs, std::vector<exec::Operand>& outputs);

}  // namespace torchtpu::aten
