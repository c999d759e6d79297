// Embedding lookups: embedding's backward and the embedding_bag family (sum / mean / max bags,
// per-sample weights, padding_idx) with their backwards.
//
// _embedding_bag's auxiliary outputs follow the shapes of PyTorch's non-CPU meta kernel and the
// meaning of the CUDA kernel (offset2bag: the bag of each index; bag_size: entries per bag;
// max_indices: the weight row that won, -1 for an empty bag). The backwards below are lowered
// too, so they read exactly what the forward wrote.
#include <cmath>

#include <ATen/ops/_embedding_bag_backward_native.h>
#include <torch/library.h>

#include "aten/lowering.h"
#include "aten/ops/lowering_util.h"
#include "aten/ops/math.h"

namespace torchtpu::aten {
namespace {

enum BagMode { kSum = 0, kMean = 1, kMax = 2 };

// rows[i] = table[index[i]] for a [N, D] table and [L] s64 index.
Value take_rows(hlo::Builder& b, const Value& table, const Value& index) {
  int64_t n = index.type.dims[0], d = table.type.dims[1];
  return b.gather(table, b.reshape(index, {n, 1}), {{1}, {0}, {0}, 1}, {1, d}, {n, d});
}

// result[index[i]] (op)= rows[i] into `init` [B, D]; an index of B or more is dropped by the scatter.
Value scatter_rows(hlo::Builder& b, const Value& init, const Value& index, const Value& rows, BinaryOp op) {
  int64_t n = index.type.dims[0];
  return b.scatter(init, b.reshape(index, {n, 1}), rows, {{1}, {0}, {0}, 1}, combine_with(op));
}

// The same for [L] values into a [B] vector.
Value scatter_values(hlo::Builder& b, const Value& init, const Value& index, const Value& values) {
  int64_t n = index.type.dims[0];
  return b.scatter(init, b.reshape(index, {n, 1}), values, {{}, {0}, {0}, 1}, combine_with(BinaryOp::kAdd));
}

Value spread_rows(hlo::Builder& b, const Value& per_row, const std::vector<int64_t>& dims) {
  return b.broadcast_in_dim(per_row, dims, {0});
}

// The bag of each index position: (number of bag starts <= i) - 1.
Value bag_of_each_index(hlo::Builder& b, const Value& offsets, int64_t num_indices, int64_t num_bags) {
  Value starts = b.slice(offsets, {0}, {num_bags}, {1});
  std::vector<int64_t> grid{num_indices, num_bags};
  Value started = b.compare(Compare::kLE, b.broadcast_in_dim(starts, grid, {1}), b.iota({DType::kS64, grid}, 0));
  Value count = b.reduce({b.convert(started, DType::kS64)}, {b.constant(0, {DType::kS64, {}})}, {1},
                         combine_with(BinaryOp::kAdd))[0];
  Value bag = count - b.constant(1, count.type);
  return b.binary(BinaryOp::kMaximum, bag, b.constant(0, bag.type));
}

// Index positions that take part (padding_idx entries do not).
Value participating(hlo::Builder& b, const Value& index, int64_t padding_idx) {
  if (padding_idx < 0) return b.constant(1, {DType::kBool, index.type.dims});
  return b.compare(Compare::kNE, index, b.constant_int(padding_idx, index.type));
}

// _embedding_bag(weight, indices, offsets, scale_grad_by_freq, mode, sparse, per_sample_weights,
//                include_last_offset, padding_idx) -> (output, offset2bag, bag_size, max_indices)
Values embedding_bag(LoweringContext& c) {
  Value weight = c.input_uncast(0);
  Value index = cast(c.b, c.input_uncast(1), DType::kS64), offsets = cast(c.b, c.input_uncast(2), DType::kS64);
  int64_t mode = c.arg(4).toInt(), padding_idx = c.arg(8).toInt();
  int64_t num_indices = index.type.dims[0], num_weights = weight.type.dims[0], d = weight.type.dims[1];
  int64_t num_bags = c.out(0).dims[0];
  c.check_on_device(all_in_range(c.b, index, num_weights));
  std::vector<int64_t> out_dims{num_bags, d};

  Value bag = bag_of_each_index(c.b, offsets, num_indices, num_bags);
  Value keep = participating(c.b, index, padding_idx);
  // Non-participating positions scatter to row num_bags, which the scatter drops.
  Value target = c.b.select(keep, bag, c.b.constant_int(num_bags, bag.type));
  Value counts = scatter_values(c.b, c.b.constant(0, {DType::kS64, {num_bags}}), target,
                                c.b.constant(1, {DType::kS64, {num_indices}}));
  Value empty = c.b.compare(Compare::kEQ, counts, c.b.constant(0, counts.type));

  DType acc = accumulator(weight.type.dtype);
  Value rows = cast(c.b, take_rows(c.b, weight, index), acc);
  Value output, max_indices = c.b.constant(0, {DType::kS64, c.out(3).dims});
  if (mode == kMax) {
    Value lowest = c.b.constant(-INFINITY, {acc, out_dims});
    Value best = scatter_rows(c.b, lowest, target, rows, BinaryOp::kMaximum);
    // The first position that reaches the maximum wins, as on CPU.
    Value winner = c.b.compare(Compare::kEQ, rows, take_rows(c.b, best, bag));
    Value position = c.b.select(winner, c.b.iota({DType::kS64, rows.type.dims}, 0),
                                c.b.constant_int(num_indices, {DType::kS64, rows.type.dims}));
    Value first = scatter_rows(c.b, c.b.constant_int(num_indices, {DType::kS64, out_dims}), target, position,
                               BinaryOp::kMinimum);
    Value clamped = c.b.clamp(c.b.constant(0, first.type), first, c.b.constant_int(num_indices - 1, first.type));
    Value flat = c.b.reshape(clamped, {num_bags * d});
    Value row_of = c.b.reshape(c.b.gather(index, c.b.reshape(flat, {num_bags * d, 1}), {{}, {0}, {0}, 1}, {1},
                                          {num_bags * d}), out_dims);
    Value empty_rows = spread_rows(c.b, empty, out_dims);
    output = c.b.select(empty_rows, c.b.constant(0, best.type), best);
    if (num_indices > 0) max_indices = c.b.select(empty_rows, c.b.constant(-1, row_of.type), row_of);
    else max_indices = c.b.constant(-1, {DType::kS64, out_dims});
  } else {
    if (c.has(6)) rows = rows * spread_rows(c.b, cast(c.b, c.input_uncast(6), acc), rows.type.dims);
    output = scatter_rows(c.b, c.b.constant(0, {acc, out_dims}), target, rows, BinaryOp::kAdd);
    if (mode == kMean) {
      Value divisor = c.b.binary(BinaryOp::kMaximum, counts, c.b.constant(1, counts.type));
      output = output / spread_rows(c.b, cast(c.b, divisor, acc), out_dims);
    }
  }
  // bag_size has one entry per offset; with include_last_offset the last one counts nothing.
  int64_t extra = c.out(2).dims[0] - num_bags;
  Value bag_size = extra > 0 ? c.b.concatenate({counts, c.b.constant(0, {DType::kS64, {extra}})}, 0) : counts;
  return {cast(c.b, output, c.out(0).dtype), cast(c.b, bag, c.out(1).dtype), cast(c.b, bag_size, c.out(2).dtype),
          cast(c.b, max_indices, c.out(3).dtype)};
}

// _embedding_bag_dense_backward(grad, indices, offset2bag, bag_size, maximum_indices, num_weights,
// scale_grad_by_freq, mode, per_sample_weights, padding_idx). _embedding_bag_backward is PyTorch's
// device-generic kernel (registered below): it calls this one, or for sparse=True builds a sparse
// gradient of device ops (sparse.cpp).
enum BackwardArg : size_t {
  kOffset2Bag = 2, kBagSize, kMaxIndices, kNumWeights, kScaleGradByFreq, kMode, kPerSampleWeights, kPaddingIdx
};

Values embedding_bag_backward(LoweringContext& c) {
  Math m{c.b};
  Value grad = cast(c.b, c.input_uncast(0), accumulator(c.out().dtype));
  Value index = cast(c.b, c.input_uncast(1), DType::kS64);
  int64_t num_weights = c.arg(kNumWeights).toInt(), mode = c.arg(kMode).toInt();
  int64_t padding_idx = c.arg(kPaddingIdx).toInt();
  int64_t num_indices = index.type.dims[0], d = grad.type.dims[1];
  Value zeros = c.b.constant(0, {grad.type.dtype, {num_weights, d}});
  if (mode == kMax) {
    Value winner = cast(c.b, c.input_uncast(kMaxIndices), DType::kS64);
    Value won = c.b.compare(Compare::kGE, winner, c.b.constant(0, winner.type));
    std::vector<int64_t> shape{grad.type.dims[0], d, 1};
    Value coords = c.b.concatenate({c.b.reshape(c.b.select(won, winner, c.b.constant(0, winner.type)), shape),
                                    c.b.iota({DType::kS64, shape}, 1)}, 2);
    Value updates = c.b.select(won, grad, m.k(0, grad));
    return {cast(c.b, c.b.scatter(zeros, coords, updates, {{}, {0, 1}, {0, 1}, 2}, combine_with(BinaryOp::kAdd)),
                 c.out().dtype)};
  }
  Value bag = cast(c.b, c.input_uncast(kOffset2Bag), DType::kS64);
  Value rows = take_rows(c.b, grad, bag);
  std::vector<int64_t> dims = rows.type.dims;
  if (mode == kMean) {
    Value bag_size = cast(c.b, c.input_uncast(kBagSize), DType::kS64);
    Value sizes = take_rows(c.b, c.b.reshape(bag_size, {bag_size.type.dims[0], 1}), bag);
    Value divisor = c.b.binary(BinaryOp::kMaximum, c.b.reshape(sizes, {num_indices}), c.b.constant(1, {DType::kS64, {num_indices}}));
    rows = rows / spread_rows(c.b, cast(c.b, divisor, rows.type.dtype), dims);
  }
  if (c.has(kPerSampleWeights))
    rows = rows * spread_rows(c.b, cast(c.b, c.input_uncast(kPerSampleWeights), rows.type.dtype), dims);
  rows = c.b.select(spread_rows(c.b, participating(c.b, index, padding_idx), dims), rows, m.k(0, rows));
  if (c.arg(kScaleGradByFreq).toBool()) {  // scale_grad_by_freq: divide by how often each weight row was used
    Value uses = scatter_values(c.b, c.b.constant(0, {rows.type.dtype, {num_weights}}), index,
                                c.b.constant(1, {rows.type.dtype, {num_indices}}));
    Value per_index = c.b.reshape(take_rows(c.b, c.b.reshape(uses, {num_weights, 1}), index), {num_indices});
    rows = rows / spread_rows(c.b, per_index, dims);
  }
  return {cast(c.b, scatter_rows(c.b, zeros, index, rows, BinaryOp::kAdd), c.out().dtype)};
}

// _embedding_bag_per_sample_weights_backward(grad, weight, indices, offsets, offset2bag, mode,
//                                            padding_idx) -> d(loss)/d(per_sample_weights)
Values per_sample_weights_backward(LoweringContext& c) {
  Math m{c.b};
  DType acc = accumulator(c.out().dtype);
  Value index = cast(c.b, c.input_uncast(2), DType::kS64), bag = cast(c.b, c.input_uncast(4), DType::kS64);
  Value grad_rows = take_rows(c.b, cast(c.b, c.input_uncast(0), acc), bag);
  Value weight_rows = take_rows(c.b, cast(c.b, c.input_uncast(1), acc), index);
  Value dot = m.reduce(grad_rows * weight_rows, {1}, BinaryOp::kAdd, 0);
  Value result = c.b.select(participating(c.b, index, c.arg(6).toInt()), dot, m.k(0, dot));
  return {cast(c.b, result, c.out().dtype)};
}

// embedding_dense_backward(grad_output, indices, num_weights, padding_idx, scale_grad_by_freq)
Values embedding_dense_backward(LoweringContext& c) {
  Math m{c.b};
  Value index = cast(c.b, c.input_uncast(1), DType::kS64);
  int64_t n = index.type.element_count(), d = c.out().dims[1], num_weights = c.arg(2).toInt();
  Value flat = c.b.reshape(index, {n});
  Value rows = c.b.reshape(c.input(0), {n, d});
  rows = c.b.select(spread_rows(c.b, participating(c.b, flat, c.arg(3).toInt()), {n, d}), rows, m.k(0, rows));
  Value grad = scatter_rows(c.b, c.b.constant(0, {rows.type.dtype, {num_weights, d}}), flat, rows, BinaryOp::kAdd);
  if (c.arg(4).toBool()) {
    Value uses = scatter_values(c.b, c.b.constant(0, {rows.type.dtype, {num_weights}}), flat,
                                c.b.constant(1, {rows.type.dtype, {n}}));
    uses = c.b.binary(BinaryOp::kMaximum, uses, m.k(1, uses));
    grad = grad / spread_rows(c.b, uses, {num_weights, d});
  }
  return {grad};
}

// embedding_renorm_(self, indices, max_norm, norm_type): rows that indices name and whose p-norm
// exceeds max_norm are scaled down to it (in place).
Values embedding_renorm(LoweringContext& c) {
  Math m{c.b};
  Value weight = c.input_uncast(0);
  Value index = c.b.reshape(cast(c.b, c.input_uncast(1), DType::kS64), {c.input_uncast(1).type.element_count()});
  int64_t num_weights = weight.type.dims[0];
  double max_norm = c.arg(2).toDouble(), p = c.arg(3).toDouble();
  c.check_on_device(all_in_range(c.b, index, num_weights));
  DType acc = accumulator(weight.type.dtype);
  Value x = cast(c.b, weight, acc);
  Value magnitude = c.b.unary(UnaryOp::kAbs, x);
  Value norm;
  if (std::isinf(p)) {
    norm = m.reduce(magnitude, {1}, BinaryOp::kMaximum, 0);
  } else {
    Value total = m.sum(c.b.binary(BinaryOp::kPower, magnitude, m.k(p, x)), {1});
    norm = c.b.binary(BinaryOp::kPower, total, m.k(1 / p, total));
  }
  Value used = c.b.compare(Compare::kGT, scatter_values(c.b, c.b.constant(0, {DType::kS64, {num_weights}}), index,
                                                        c.b.constant(1, {DType::kS64, index.type.dims})),
                           c.b.constant(0, {DType::kS64, {num_weights}}));
  Value shrink = c.b.binary(BinaryOp::kAnd, used, c.b.compare(Compare::kGT, norm, m.k(max_norm, norm)));
  Value scale = c.b.select(shrink, m.k(max_norm, norm) / (norm + m.k(1e-7, norm)), m.k(1, norm));
  return {cast(c.b, x * spread_rows(c.b, scale, x.type.dims), weight.type.dtype)};
}

}  // namespace

TORCHTPU_LOWERINGS(embedding) {
  register_lowering({"embedding_renorm_", "embedding_renorm.out"}, embedding_renorm,
                    checked("index out of range in self"));
  register_lowering({"_embedding_bag", "_embedding_bag_forward_only", "_embedding_bag_forward_only.out"},
                    embedding_bag, checked("index out of range in self"));
  register_lowering({"_embedding_bag_dense_backward", "_embedding_bag_dense_backward.out"},
                    embedding_bag_backward);
  register_lowering({"_embedding_bag_per_sample_weights_backward",
                     "_embedding_bag_per_sample_weights_backward.out"}, per_sample_weights_backward);
  // (grad_output, indices, num_weights, padding_idx, scale_grad_by_freq): padded positions add a
  // zero gradient to row 0; counting them (scale_grad_by_freq) would not be exact.
  PaddingRule padded_positions{exec::Fill::kZero, [](const std::vector<c10::IValue>& args, size_t arg, int64_t dim) {
    return arg == 1 || (arg == 0 && dim < args[0].toTensor().dim() - 1);
  }};
  padded_positions.applies = [](const std::vector<c10::IValue>& args) { return !args[4].toBool(); };
  register_lowering({"embedding_dense_backward", "embedding_dense_backward.out"}, embedding_dense_backward,
                    padded({}, padded_positions));
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_embedding_bag_backward", at::native::_embedding_bag_backward_symint);
}

}  // namespace torchtpu::aten
