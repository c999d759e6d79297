// Searches in sorted sequences: searchsorted and bucketize, as a binary search unrolled over the
// (static) sequence length: log2(n) steps of one gather and one compare each, for every value
// at once.
#include <algorithm>
#include <cstdint>
#include <optional>

#include "aten/lowering.h"
#include "aten/ops/lowering_util.h"

namespace torchtpu::aten {
namespace {

// Where each of `values` would be inserted into the rows of `sequence` ([n] shared by all values,
// or [..., n] with values [..., m] over the same leading dimensions) to keep them sorted: after
// equal elements when `right`. `sorter` (optional, like sequence) lists each row's sorted order.
// The comparisons are CPU's (!(element >= value) moves right), which put NaN values last.
Value search_sorted(hlo::Builder& b, Value sequence, const Value& values, const Value* sorter, bool right,
                    DType result) {
  int64_t n = sequence.type.dims.back();
  int64_t rows = sequence.type.element_count() / std::max<int64_t>(n, 1);
  int64_t per_row = values.type.element_count() / std::max<int64_t>(rows, 1);
  if (n == 0 || values.type.element_count() == 0) return b.constant(0, {result, values.type.dims});
  hlo::TensorType index{DType::kS64, {rows, per_row}};
  Value row_start = b.iota(index, 0) * b.constant_int(n, index);
  Value flat = b.reshape(sequence, {rows * n});
  auto element_at = [&](const Value& source, const Value& position) {  // source[row, position]
    Value at = b.reshape(row_start + position, {rows, per_row, 1});
    return b.gather(source, at, {{}, {0}, {0}, 2}, {1}, {rows, per_row});
  };
  if (sorter) {  // the sequence in sorted order: flat[row, j] = sequence[row, sorter[row, j]]
    Value all = b.reshape(cast(b, *sorter, DType::kS64), {rows * n, 1});
    Value row_of = b.reshape(b.iota({DType::kS64, {rows, n}}, 0) * b.constant_int(n, {DType::kS64, {rows, n}}), {rows * n, 1});
    flat = b.gather(flat, all + row_of, {{}, {0}, {0}, 1}, {1}, {rows * n});
  }
  Value v = b.reshape(values, {rows, per_row});
  Value lo = b.constant(0, index), hi = b.constant_int(n, index);
  Value one = b.constant(1, index), last = b.constant_int(n - 1, index);
  for (int64_t span = n; span > 0; span /= 2) {  // floor(log2 n) + 1 halvings
    Value mid = (lo + hi) / b.constant(2, index);
    Value element = element_at(flat, b.binary(BinaryOp::kMinimum, mid, last));
    Value move_right = b.unary(UnaryOp::kNot, b.compare(right ? Compare::kGT : Compare::kGE, element, v));
    Value active = b.compare(Compare::kLT, lo, hi);
    lo = b.select(b.binary(BinaryOp::kAnd, active, move_right), mid + one, lo);
    hi = b.select(b.binary(BinaryOp::kAnd, active, b.unary(UnaryOp::kNot, move_right)), mid, hi);
  }
  return b.reshape(cast(b, lo, result), values.type.dims);
}

bool side_is_right(const LoweringContext& c, size_t right, size_t side) {
  return c.arg(right).toBool() || (c.arg(side).isString() && c.arg(side).toStringRef() == "right");
}

// Both operands in one dtype that holds either exactly enough to compare them.
std::pair<Value, Value> comparable(hlo::Builder& b, const Value& sequence, const Value& values) {
  DType s = sequence.type.dtype, v = values.type.dtype;
  if (s == v) return {sequence, values};
  DType common = is_floating(s) || is_floating(v) ? DType::kF64 : DType::kS64;
  return {cast(b, sequence, common), cast(b, values, common)};
}

// searchsorted(sorted_sequence, self, out_int32, right, side, sorter); a Scalar self arrives as a
// 0-d value.
Values searchsorted(LoweringContext& c) {
  auto [sequence, values] = comparable(c.b, c.input_uncast(0), c.input_uncast(1));
  std::optional<Value> sorter;
  if (c.has(5)) sorter = c.input_uncast(5);
  return {search_sorted(c.b, sequence, values, sorter ? &*sorter : nullptr, side_is_right(c, 3, 4), c.out().dtype)};
}

// bucketize(self, boundaries, out_int32, right): searchsorted over 1-D boundaries.
Values bucketize(LoweringContext& c) {
  auto [boundaries, values] = comparable(c.b, c.input_uncast(1), c.input_uncast(0));
  return {search_sorted(c.b, boundaries, values, nullptr, c.arg(3).toBool(), c.out().dtype)};
}

}  // namespace

TORCHTPU_LOWERINGS(search) {
  register_lowering({"searchsorted.Tensor", "searchsorted.Tensor_out", "searchsorted.Scalar", "searchsorted.Scalar_out"},
                    searchsorted);
  register_lowering({"bucketize.Tensor", "bucketize.Tensor_out", "bucketize.Scalar", "bucketize.Scalar_out"},
                    bucketize);
}

}  // namespace torchtpu::aten
