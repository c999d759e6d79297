// One operation as the executor sees it: a lowering plus the storages and views it reads/writes.
#pragma once

#include <functional>
#include <memory>
#include <optional>
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

// What the padded positions of an operand read as: the identity of the op's reduction (0 for a
// sum or a matmul, 1 for a product, the lowest value for a max or a softmax).
enum class Fill { kZero, kOne, kLowest, kHighest };

// An operand whose sizes vary between calls (docs/design.md, "Shapes that change"): the program
// sees it as a box of bucket sizes and reads its exact geometry at run time, so one program
// serves every size the box holds (exec/padded_view.h).
struct Padding {
  std::vector<int64_t> box;  // per view dimension, at least its exact size
  Fill fill = Fill::kZero;
  int64_t at = -1;  // where its geometry starts in the call's geometry input (set by the executor)
  // The one dimension whose size varies, where there is one (-1: none or several): a view that
  // fits its box exactly then runs the program of the sizes inside it (exec/padded_view.cpp).
  int64_t rows = -1;
  // The box holds the view's elements in storage order, not at their positions: the flat buffer's
  // first elements, reshaped. Set where the padded operands of an op by rows share one layout in
  // them (exec/padded_view.h, share_storage_order), which then needs no gather and no per-row write.
  bool in_storage_order = false;
  // An input that is its storage's whole contents: past its last element lies the buffer's tail,
  // which holds zeros (exec/buffer_ref.h). Set by the executor (attach_geometry).
  bool covers_storage = false;
};

struct Operand {
  BufferRef* storage;
  View view;
  std::optional<Padding> padding = std::nullopt;
  // Where its offset is in the call's geometry input, when the offset arrives at run time
  // (exec/runtime_offset.h); -1 where the offset is part of the program.
  int64_t offset_at = -1;
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
  // The lowering also gets each input's exact sizes (an s64[rank] value per input, after the
  // inputs): a padded op whose result depends on them (cat's offsets, attention's key length).
  bool sizes_to_lowering = false;
  // A matmul or convolution (the op record's LoweringOptions::matmul). Fused mode runs one whose
  // result is a matrix times a vector as a program of its own (exec/quick_compile.h).
  bool matmul = false;
  // Set by the executor when an operand is padded or has a run-time offset: the s64 storage
  // holding their geometry, read by the program as its last input.
  std::shared_ptr<BufferRef> geometry = nullptr;
};

}  // namespace torchtpu::exec
